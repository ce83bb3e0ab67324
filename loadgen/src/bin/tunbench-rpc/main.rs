//! tunbench-rpc: small-message RPC over TCP, for the `rpc` workload (docs/methodology.md).
//!
//! `server` answers request frames; `client` drives many concurrent closed-loop connections
//! with request/response sizes from a weighted mix and prints one JSON object on stdout:
//! transactions/s, latency percentiles, mean and standard deviation. Threads with nonblocking
//! sockets and poll(2), no async runtime: a few hundred connections per thread are cheap, and
//! the binary shares the load generator's build and its two dependencies.

mod client;
mod frame;
mod hist;
mod server;
mod sizes;

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

pub const TOOL: &str = "tunbench-rpc";
pub const DEFAULT_MIX: &str = "64-128:70,200-512:25,1024-4096:5";
const MAX_CONNECTIONS: usize = 65_536;

const USAGE: &str = "usage:
  tunbench-rpc server --bind ADDR --port PORT [--threads N] [--max-seconds S]
  tunbench-rpc client --dst ADDR --port PORT [--connections 64] [--threads N]
                      [--mix LO-HI:W,...] [--response-mix LO-HI:W,...]
                      [--duration S] [--warmup S] [--seed N]
  sizes are message bytes including the 8-byte request / 4-byte response header;
  default mix (requests and responses): 64-128:70,200-512:25,1024-4096:5";

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

pub fn stop_requested() -> bool {
    STOP.load(Ordering::Relaxed)
}

fn install_stop_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is valid; the handler only stores an atomic.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// poll(2) over `fds`; EINTR is a normal return (the loops check the stop flag).
pub fn poll_fds(fds: &mut [libc::pollfd], timeout_ms: i32) {
    // SAFETY: the pointer and length describe a valid, exclusively borrowed slice.
    unsafe {
        libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms);
    }
}

/// Try again later: nothing to read or no room to write yet (a nonblocking socket), a blocking
/// socket's timeout, or a signal.
pub fn retry(e: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted)
}

struct Args(Vec<(String, String)>);

impl Args {
    fn parse(raw: &[String], known: &[&str]) -> Result<Args, String> {
        let mut out = Vec::new();
        let mut it = raw.iter();
        while let Some(k) = it.next() {
            let (key, val) = match k.split_once('=') {
                Some((a, b)) => (a.to_string(), b.to_string()),
                None => (k.clone(), it.next().ok_or_else(|| format!("{k} needs a value"))?.clone()),
            };
            if !known.contains(&key.as_str()) {
                return Err(format!("unknown option {key}"));
            }
            out.push((key, val));
        }
        Ok(Args(out))
    }

    fn get(&self, k: &str) -> Option<&str> {
        self.0.iter().rev().find(|(a, _)| a == k).map(|(_, v)| v.as_str())
    }

    fn num<T: std::str::FromStr>(&self, k: &str, default: T, what: &str) -> Result<T, String> {
        match self.get(k) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| format!("{k} {v:?} is not {what}")),
        }
    }

    fn addr(&self, k: &str) -> Result<SocketAddr, String> {
        let ip: IpAddr = self
            .get(k)
            .ok_or_else(|| format!("{k} is required"))?
            .parse()
            .map_err(|_| format!("{k} is not an IP address"))?;
        let port: u16 = self
            .get("--port")
            .ok_or("--port is required")?
            .parse()
            .map_err(|_| "--port is not a port number")?;
        if port == 0 {
            return Err("--port 0 is not a port".into());
        }
        Ok(SocketAddr::new(ip, port))
    }
}

fn default_threads() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(4)
}

fn threads(a: &Args) -> Result<usize, String> {
    let t: usize = a.num("--threads", 0, "a thread count")?;
    if t > 64 {
        return Err(format!("--threads {t} out of range 0..64 (0 = one per CPU, at most 4)"));
    }
    Ok(if t == 0 { default_threads() } else { t })
}

fn seconds(a: &Args, k: &str, default: f64, min: f64) -> Result<f64, String> {
    let v: f64 = a.num(k, default, "a number of seconds")?;
    if !(v.is_finite() && v >= min && v <= 86_400.0) {
        return Err(format!("{k} {v} out of range {min}..86400 seconds"));
    }
    Ok(v)
}

fn server(raw: &[String]) -> Result<serde_json::Value, String> {
    let a = Args::parse(raw, &["--bind", "--port", "--threads", "--max-seconds"])?;
    let opts = server::ServerOpts {
        bind: a.addr("--bind")?,
        threads: threads(&a)?,
        max_seconds: seconds(&a, "--max-seconds", 0.0, 0.0)?,
    };
    server::run(&opts)
}

fn client(raw: &[String]) -> Result<serde_json::Value, String> {
    let a = Args::parse(
        raw,
        &[
            "--dst",
            "--port",
            "--connections",
            "--threads",
            "--mix",
            "--response-mix",
            "--duration",
            "--warmup",
            "--seed",
        ],
    )?;
    let connections: usize = a.num("--connections", 64, "a connection count")?;
    if !(1..=MAX_CONNECTIONS).contains(&connections) {
        return Err(format!("--connections {connections} out of range 1..{MAX_CONNECTIONS}"));
    }
    let mix = sizes::SizeMix::parse(a.get("--mix").unwrap_or(DEFAULT_MIX)).map_err(|e| format!("--mix: {e}"))?;
    let response_mix = match a.get("--response-mix") {
        Some(s) => sizes::SizeMix::parse(s).map_err(|e| format!("--response-mix: {e}"))?,
        None => mix.clone(),
    };
    let opts = client::ClientOpts {
        dst: a.addr("--dst")?,
        connections,
        threads: threads(&a)?.min(connections),
        mix,
        response_mix,
        duration: seconds(&a, "--duration", 10.0, 0.1)?,
        warmup: seconds(&a, "--warmup", 1.0, 0.0)?,
        seed: a.num("--seed", 1, "a whole number")?,
    };
    client::run(opts)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    install_stop_handlers();
    let result = match args.first().map(String::as_str) {
        Some("server") => server(&args[1..]),
        Some("client") => client(&args[1..]),
        Some("-h" | "--help") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => {
            eprintln!("{TOOL}: give a mode, server or client\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{TOOL}: {e}");
            ExitCode::from(2)
        }
    }
}
