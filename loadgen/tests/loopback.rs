//! Integration test over 127.0.0.1 with real sockets: a paced run must be
//! received completely and achieve the target rate within 2%.

use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_tunbench-loadgen");

/// Find `count` consecutive free UDP ports on 127.0.0.1.
fn free_ports(count: u16) -> u16 {
    // tests run in parallel threads: give each call its own starting point
    static NEXT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
    let slot = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let start = 30000 + (std::process::id() % 2000) as u16 * 10 + slot * 1000;
    'outer: for base in (start..60000).step_by(count as usize + 1) {
        for p in base..base + count {
            if UdpSocket::bind(("127.0.0.1", p)).is_err() {
                continue 'outer;
            }
        }
        return base;
    }
    panic!("no free ports");
}

fn start_recv(port: u16, extra: &[&str]) -> std::process::Child {
    let mut child = Command::new(BIN)
        .args(["recv", "--bind", "127.0.0.1", "--port", &port.to_string(), "--max-seconds", "20"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn recv");
    // wait for the ready line instead of sleeping
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "receiver did not report ready");
    child
}

fn run_json(cmd: &mut Command) -> Value {
    let out = cmd.output().expect("run");
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

fn wait_json(child: std::process::Child) -> Value {
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).expect("recv json")
}

#[test]
fn paced_run_received_fully_and_on_rate() {
    let port = free_ports(2);
    let recv = start_recv(port, &["--ports-count", "2"]);
    let target = 20_000.0;
    let s = run_json(Command::new(BIN).args([
        "send",
        "--dst",
        "127.0.0.1",
        "--port",
        &port.to_string(),
        "--ports-count",
        "2",
        "--flows",
        "100",
        "--imix",
        "simple",
        "--rate-pps",
        "20k",
        "--duration",
        "1",
    ]));
    let r = wait_json(recv);
    let sent = s["sent_packets"].as_u64().unwrap();
    assert!(sent > 0);
    assert_eq!(s["send_errors"].as_u64(), Some(0));
    let achieved = s["achieved_pps"].as_f64().unwrap();
    assert!((achieved - target).abs() / target < 0.02, "achieved {achieved} pps");
    assert_eq!(s["sender_limited"], Value::Bool(false));
    // the receiver's own view of the rate
    let rx_pps = r["rx_pps"].as_f64().unwrap();
    assert!((rx_pps - target).abs() / target < 0.02, "rx {rx_pps} pps");
    assert_eq!(r["end_received"], Value::Bool(true));
    assert_eq!(r["stop_reason"], "end");
    assert_eq!(r["received_packets"].as_u64(), Some(sent));
    assert_eq!(r["unique_packets"].as_u64(), Some(sent));
    assert_eq!(r["expected_packets"].as_u64(), Some(sent));
    assert_eq!(r["lost"].as_i64(), Some(0));
    assert_eq!(r["duplicates"].as_u64(), Some(0));
    assert_eq!(r["flows_seen"].as_u64(), Some(100));
    assert_eq!(r["end_flows_reported"].as_u64(), Some(100));
    assert_eq!(r["per_size_received"], s["per_size_sent"]);
    assert_eq!(r["received_bytes_l3"], s["sent_bytes_l3"]);
    // simple IMIX proportions are exact per 12-packet cycle
    let c40 = s["per_size_sent"]["40"].as_u64().unwrap() as f64;
    assert!((c40 / sent as f64 - 7.0 / 12.0).abs() < 0.01);
    assert!(r["latency_us"]["p50"].as_f64().unwrap() > 0.0);
}

#[test]
fn sigterm_prints_json_quickly() {
    let port = free_ports(1);
    let recv = start_recv(port, &[]);
    let sender = Command::new(BIN)
        .args([
            "send",
            "--dst",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--size",
            "100",
            "--rate-pps",
            "5k",
            "--duration",
            "30",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    unsafe { libc::kill(sender.id() as i32, libc::SIGTERM) };
    let out = sender.wait_with_output().unwrap();
    assert!(t.elapsed() < Duration::from_millis(500), "sender took {:?}", t.elapsed());
    assert!(out.status.success());
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["interrupted"], Value::Bool(true));
    // the sender still sent END, so the receiver finishes on its own
    let r = wait_json(recv);
    assert_eq!(r["end_received"], Value::Bool(true));
    assert_eq!(r["lost"].as_i64(), Some(0));
    assert_eq!(r["received_packets"], s["sent_packets"]);
}

#[test]
fn bad_args_exit_2_with_one_line() {
    let out = Command::new(BIN)
        .args(["send", "--dst", "127.0.0.1", "--port", "9", "--size", "20"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("tunbench-loadgen: "), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1);
    assert!(out.stdout.is_empty());
}

#[test]
fn unreachable_rate_is_flagged_and_keeps_duration() {
    let port = free_ports(1);
    let recv = start_recv(port, &[]);
    let t = Instant::now();
    let s = run_json(Command::new(BIN).args([
        "send",
        "--dst",
        "127.0.0.1",
        "--port",
        &port.to_string(),
        "--size",
        "64",
        "--rate-pps",
        "50M",
        "--duration",
        "0.5",
    ]));
    assert!(t.elapsed() < Duration::from_millis(1500), "took {:?}", t.elapsed());
    assert_eq!(s["sender_limited"], Value::Bool(true));
    assert!(s["duration_s"].as_f64().unwrap() < 0.7);
    let r = wait_json(recv);
    assert_eq!(r["expected_packets"], s["sent_packets"]);
}

#[test]
fn threaded_sender_splits_flows_and_rate_and_reports_one_end() {
    let port = free_ports(1);
    let recv = start_recv(port, &["--per-flow"]);
    let target = 20_000.0;
    let args = format!("send --dst 127.0.0.1 --port {port} --flows 10 --size 100 --rate-pps 20k --duration 1 --threads 3");
    let s = run_json(Command::new(BIN).args(args.split(' ')));
    let r = wait_json(recv);
    assert_eq!(s["threads"], 3);
    let sent = s["sent_packets"].as_u64().unwrap();
    let achieved = s["achieved_pps"].as_f64().unwrap();
    assert!((achieved / target - 1.0).abs() < 0.02, "achieved {achieved}");
    // every flow sent its equal share: the threads split the rate by their flows (4/3/3)
    let per_flow: Vec<u64> = s["per_flow_sent"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    assert_eq!(per_flow.len(), 10);
    let (lo, hi) = (*per_flow.iter().min().unwrap(), *per_flow.iter().max().unwrap());
    assert!(hi - lo <= hi / 50 + 2, "uneven flows {per_flow:?}");
    assert_eq!(per_flow.iter().sum::<u64>(), sent);
    // one sender session, its END carries the total of all threads
    assert_eq!(r["end_sessions"].as_array().unwrap().len(), 1);
    assert_eq!(r["expected_packets"].as_u64().unwrap(), sent);
    assert_eq!(r["end_flows_reported"], 10);
    assert_eq!(r["lost"], 0);
    assert_eq!(r["flows_seen"], 10);
}
