//! The client: `connections` TCP connections spread over `threads` threads, each connection
//! closed-loop (one request outstanding: send, wait for the whole response, send the next),
//! like a pool of RPC stubs. Sizes come from the mix per request. Transactions completing in
//! the measurement window (after the warm-up) are counted and their latency (first byte
//! written to last byte read) recorded.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Barrier, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::hist::Hist;
use crate::sizes::{Rng, SizeMix};
use crate::{frame, poll_fds, retry, stop_requested};

pub struct ClientOpts {
    pub dst: SocketAddr,
    pub connections: usize,
    pub threads: usize,
    pub mix: SizeMix,
    pub response_mix: SizeMix,
    pub duration: f64,
    pub warmup: f64,
    pub seed: u64,
}

enum State {
    Send,
    Recv,
}

struct Conn {
    s: TcpStream,
    state: State,
    out: Vec<u8>,
    off: usize,
    need: u32,
    got: u32,
    hdr: [u8; 4],
    sent_at: Instant,
}

#[derive(Default)]
struct ThreadResult {
    hist: Option<Hist>,
    transactions: u64,
    per_second: Vec<u64>,
    request_bytes: u64,
    response_bytes: u64,
    connected: u64,
    connect_errors: Vec<String>,
    conn_errors: u64,
    framing_errors: u64,
}

pub fn run(o: ClientOpts) -> Result<Value, String> {
    let o = Arc::new(o);
    let barrier = Arc::new(Barrier::new(o.threads));
    let start: Arc<OnceLock<Instant>> = Arc::new(OnceLock::new());
    let handles: Vec<_> = (0..o.threads)
        .map(|i| {
            let (o, b, s) = (o.clone(), barrier.clone(), start.clone());
            std::thread::spawn(move || thread(i, &o, &b, &s))
        })
        .collect();
    let mut all = ThreadResult {
        hist: Some(Hist::new()),
        ..Default::default()
    };
    for h in handles {
        let r = h.join().map_err(|_| "a client thread panicked".to_string())?;
        let hist = all.hist.as_mut().unwrap();
        hist.merge(r.hist.as_ref().unwrap());
        all.transactions += r.transactions;
        all.request_bytes += r.request_bytes;
        all.response_bytes += r.response_bytes;
        all.connected += r.connected;
        all.conn_errors += r.conn_errors;
        all.framing_errors += r.framing_errors;
        all.connect_errors.extend(r.connect_errors);
        if all.per_second.len() < r.per_second.len() {
            all.per_second.resize(r.per_second.len(), 0);
        }
        for (a, b) in all.per_second.iter_mut().zip(&r.per_second) {
            *a += b;
        }
    }
    if all.connected == 0 {
        let first = all.connect_errors.first().cloned().unwrap_or_default();
        return Err(format!("no connection to {} could be opened: {first}", o.dst));
    }
    let h = all.hist.as_ref().unwrap();
    let us = |v: Option<f64>| v.map(|x| x / 1000.0);
    Ok(json!({
        "tool": crate::TOOL, "role": "client", "dst": o.dst.to_string(),
        "connections": o.connections, "connected": all.connected, "threads": o.threads,
        "mix": {"spec": o.mix.spec, "mean_size": o.mix.mean_size()},
        "response_mix": {"spec": o.response_mix.spec, "mean_size": o.response_mix.mean_size()},
        "warmup_s": o.warmup, "duration_s": o.duration, "seed": o.seed,
        "transactions": all.transactions, "tx_per_s": all.transactions as f64 / o.duration,
        "latency_us": {
            "min": us((h.count > 0).then_some(h.min as f64)), "p50": us(h.percentile(50.0)),
            "p90": us(h.percentile(90.0)), "p99": us(h.percentile(99.0)),
            "p99_9": us(h.percentile(99.9)), "max": us((h.count > 0).then_some(h.max as f64)),
            "mean": us(h.mean()), "std": us(h.std()), "samples": h.count,
        },
        "per_second": all.per_second,
        "request_bytes": all.request_bytes, "response_bytes": all.response_bytes,
        "conn_errors": all.conn_errors, "framing_errors": all.framing_errors,
        "connect_errors": all.connect_errors.len(),
        "interrupted": stop_requested(),
    }))
}

fn thread(idx: usize, o: &ClientOpts, barrier: &Barrier, start: &OnceLock<Instant>) -> ThreadResult {
    let mut r = ThreadResult {
        hist: Some(Hist::new()),
        ..Default::default()
    };
    let mut rng = Rng::new(o.seed.wrapping_add(idx as u64 * 7919));
    let mut conns = Vec::new();
    for _ in (idx..o.connections).step_by(o.threads) {
        match TcpStream::connect_timeout(&o.dst, Duration::from_secs(3)) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                if s.set_nonblocking(true).is_ok() {
                    conns.push(Conn {
                        s,
                        state: State::Send,
                        out: Vec::with_capacity(4096),
                        off: 0,
                        need: 0,
                        got: 0,
                        hdr: [0; 4],
                        sent_at: Instant::now(),
                    });
                }
            }
            Err(e) => {
                // a path that refuses or times out one connection does the same to the next:
                // stop here rather than wait out a timeout per connection
                r.connect_errors.push(e.to_string());
                break;
            }
        }
    }
    r.connected = conns.len() as u64;
    // One connection on this thread: blocking reads with a short timeout instead of poll(2),
    // a syscall less per wake-up (what sockperf's ping-pong does); the loop is the same.
    let single = conns.len() == 1;
    if single {
        let s = &conns[0].s;
        let _ = s.set_nonblocking(false);
        let _ = s.set_read_timeout(Some(Duration::from_millis(20)));
        let _ = s.set_write_timeout(Some(Duration::from_millis(20)));
    }
    barrier.wait();
    let t0 = *start.get_or_init(Instant::now);
    let m0 = t0 + Duration::from_secs_f64(o.warmup);
    let end = m0 + Duration::from_secs_f64(o.duration);
    for c in conns.iter_mut() {
        next_request(c, o, &mut rng);
    }
    let mut scratch = vec![0u8; 64 * 1024];
    let hist = r.hist.as_mut().unwrap();
    while !conns.is_empty() && !stop_requested() {
        let now = Instant::now();
        if now >= end {
            break;
        }
        let mut pfds: Vec<libc::pollfd> = conns
            .iter()
            .map(|c| libc::pollfd {
                fd: c.s.as_raw_fd(),
                events: if matches!(c.state, State::Send) {
                    libc::POLLOUT
                } else {
                    libc::POLLIN
                },
                revents: 0,
            })
            .collect();
        if single {
            pfds[0].revents = pfds[0].events;
        } else {
            let wait_ms = ((end - now).as_millis() as i32).clamp(1, 20);
            poll_fds(&mut pfds, wait_ms);
        }
        let mut closed = Vec::new();
        for (i, p) in pfds.iter().enumerate() {
            if p.revents == 0 {
                continue;
            }
            let c = &mut conns[i];
            let ok = match c.state {
                State::Send => send(c, &mut r.request_bytes),
                State::Recv => match recv(c, &mut scratch, &mut r.response_bytes, &mut r.framing_errors) {
                    Some(true) => {
                        let done = Instant::now();
                        if done >= m0 && done < end {
                            hist.record((done - c.sent_at).as_nanos() as u64);
                            r.transactions += 1;
                            let sec = (done - m0).as_secs() as usize;
                            if r.per_second.len() <= sec {
                                r.per_second.resize(sec + 1, 0);
                            }
                            r.per_second[sec] += 1;
                        }
                        next_request(c, o, &mut rng);
                        send(c, &mut r.request_bytes)
                    }
                    Some(false) => true,
                    None => false,
                },
            };
            if !ok {
                closed.push(i);
            }
        }
        for i in closed.into_iter().rev() {
            conns.swap_remove(i);
            r.conn_errors += 1;
        }
    }
    r
}

fn next_request(c: &mut Conn, o: &ClientOpts, rng: &mut Rng) {
    let total = o.mix.draw(rng);
    let resp = o.response_mix.draw(rng).max(frame::RESP_HEADER);
    frame::request(&mut c.out, total, resp);
    c.off = 0;
    c.need = resp;
    c.got = 0;
    c.state = State::Send;
    c.sent_at = Instant::now();
}

/// Write what the socket takes; the whole request written -> wait for the response.
fn send(c: &mut Conn, bytes: &mut u64) -> bool {
    while c.off < c.out.len() {
        match c.s.write(&c.out[c.off..]) {
            Ok(n) => {
                c.off += n;
                *bytes += n as u64;
            }
            Err(e) if retry(&e) => return true,
            Err(_) => return false,
        }
    }
    c.state = State::Recv;
    true
}

/// Some(true): the response is complete; Some(false): not yet; None: closed or broken.
fn recv(c: &mut Conn, scratch: &mut [u8], bytes: &mut u64, framing: &mut u64) -> Option<bool> {
    let want = (c.need - c.got) as usize;
    let cap = want.min(scratch.len());
    let n = match c.s.read(&mut scratch[..cap]) {
        Ok(0) => return None,
        Ok(n) => n,
        Err(e) if retry(&e) => return Some(false),
        Err(_) => return None,
    };
    let at = c.got as usize;
    for (k, b) in scratch[..n.min(4usize.saturating_sub(at))].iter().enumerate() {
        c.hdr[at + k] = *b;
    }
    c.got += n as u32;
    *bytes += n as u64;
    if c.got >= 4 && c.got as usize - n < 4 && u32::from_le_bytes(c.hdr) != c.need {
        *framing += 1;
        return None;
    }
    Some(c.got >= c.need)
}
