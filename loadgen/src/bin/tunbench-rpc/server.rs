//! The server: one acceptor (the main thread) hands each connection to a worker thread
//! round-robin; a worker polls its connections, reads whole request frames and answers each
//! with a response of the length the request asked for. It ends when every client connection
//! has closed (after at least one arrived), on SIGTERM/SIGINT, or after --max-seconds.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::{frame, poll_fds, stop_requested};

pub struct ServerOpts {
    pub bind: SocketAddr,
    pub threads: usize,
    pub max_seconds: f64,
}

#[derive(Default)]
struct Totals {
    open: AtomicU64,
    accepted: AtomicU64,
    transactions: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    framing_errors: AtomicU64,
}

struct Conn {
    s: TcpStream,
    inbuf: Vec<u8>,
    out: Vec<u8>,
    off: usize,
}

pub fn run(o: &ServerOpts) -> Result<Value, String> {
    let listener = TcpListener::bind(o.bind).map_err(|e| format!("cannot listen on {}: {e}", o.bind))?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    eprintln!("ready");
    let totals = Arc::new(Totals::default());
    let done = Arc::new(AtomicBool::new(false));
    let mut senders = Vec::new();
    let mut workers = Vec::new();
    for _ in 0..o.threads {
        let (tx, rx) = mpsc::channel::<TcpStream>();
        senders.push(tx);
        let (t, d) = (totals.clone(), done.clone());
        workers.push(std::thread::spawn(move || worker(rx, &t, &d)));
    }
    let t0 = Instant::now();
    let mut next = 0;
    let stop_reason = loop {
        if stop_requested() {
            break "signal";
        }
        if o.max_seconds > 0.0 && t0.elapsed().as_secs_f64() >= o.max_seconds {
            break "max-seconds";
        }
        if totals.accepted.load(Ordering::SeqCst) > 0 && totals.open.load(Ordering::SeqCst) == 0 {
            break "clients-closed";
        }
        let mut pfd = [libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        poll_fds(&mut pfd, 50);
        loop {
            match listener.accept() {
                Ok((s, _)) => {
                    let _ = s.set_nodelay(true);
                    s.set_nonblocking(true).map_err(|e| e.to_string())?;
                    totals.open.fetch_add(1, Ordering::SeqCst);
                    totals.accepted.fetch_add(1, Ordering::SeqCst);
                    let _ = senders[next % senders.len()].send(s);
                    next += 1;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => break,
                Err(e) => return Err(format!("accept failed: {e}")),
            }
        }
    };
    done.store(true, Ordering::SeqCst);
    drop(senders);
    for w in workers {
        let _ = w.join();
    }
    let secs = t0.elapsed().as_secs_f64();
    Ok(json!({
        "tool": crate::TOOL, "role": "server", "threads": o.threads,
        "accepted": totals.accepted.load(Ordering::SeqCst),
        "transactions": totals.transactions.load(Ordering::SeqCst),
        "bytes_in": totals.bytes_in.load(Ordering::SeqCst),
        "bytes_out": totals.bytes_out.load(Ordering::SeqCst),
        "framing_errors": totals.framing_errors.load(Ordering::SeqCst),
        "seconds": secs, "stop_reason": stop_reason,
    }))
}

fn worker(rx: mpsc::Receiver<TcpStream>, t: &Totals, done: &AtomicBool) {
    let mut conns: Vec<Conn> = Vec::new();
    let mut scratch = vec![0u8; 64 * 1024];
    let mut blocking = false;
    while !done.load(Ordering::SeqCst) {
        while let Ok(s) = rx.try_recv() {
            conns.push(Conn {
                s,
                inbuf: Vec::with_capacity(4096),
                out: Vec::with_capacity(4096),
                off: 0,
            });
        }
        if conns.is_empty() {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        // One connection on this worker: blocking reads with a short timeout instead of
        // poll(2), a syscall less per request (the client does the same); several: poll.
        let single = conns.len() == 1;
        if single != blocking {
            for c in &conns {
                let _ = c.s.set_nonblocking(!single);
                let _ = c.s.set_read_timeout(single.then_some(Duration::from_millis(20)));
                let _ = c.s.set_write_timeout(single.then_some(Duration::from_millis(20)));
            }
            blocking = single;
        }
        let mut pfds: Vec<libc::pollfd> = conns
            .iter()
            .map(|c| libc::pollfd {
                fd: c.s.as_raw_fd(),
                events: if c.off < c.out.len() { libc::POLLOUT } else { libc::POLLIN },
                revents: 0,
            })
            .collect();
        if single {
            pfds[0].revents = pfds[0].events;
        } else {
            poll_fds(&mut pfds, 10);
        }
        let mut closed = Vec::new();
        for (i, p) in pfds.iter().enumerate() {
            if p.revents != 0 && !serve(&mut conns[i], &mut scratch, t) {
                closed.push(i);
            }
        }
        for i in closed.into_iter().rev() {
            conns.swap_remove(i);
            t.open.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Read what is there, answer every whole request, write what the socket takes. False: closed.
fn serve(c: &mut Conn, scratch: &mut [u8], t: &Totals) -> bool {
    if c.off < c.out.len() {
        return flush(c, t);
    }
    match c.s.read(scratch) {
        Ok(0) => return false,
        Ok(n) => {
            t.bytes_in.fetch_add(n as u64, Ordering::Relaxed);
            c.inbuf.extend_from_slice(&scratch[..n]);
        }
        Err(e) if crate::retry(&e) => return true,
        Err(_) => return false,
    }
    let mut used = 0;
    while let Some((total, resp)) = frame::header(&c.inbuf[used..]) {
        if total < frame::HEADER || resp < frame::RESP_HEADER {
            t.framing_errors.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        if c.inbuf.len() - used < total as usize {
            break;
        }
        used += total as usize;
        frame::response(&mut c.out, resp);
        t.transactions.fetch_add(1, Ordering::Relaxed);
    }
    c.inbuf.drain(..used);
    flush(c, t)
}

fn flush(c: &mut Conn, t: &Totals) -> bool {
    while c.off < c.out.len() {
        match c.s.write(&c.out[c.off..]) {
            Ok(n) => {
                c.off += n;
                t.bytes_out.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) if crate::retry(&e) => return true,
            Err(_) => return false,
        }
    }
    c.out.clear();
    c.off = 0;
    true
}
