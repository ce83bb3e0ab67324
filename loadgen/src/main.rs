//! tunbench-loadgen: UDP load generator / receiver for tunnel benchmarks.
//! See README.md for the CLI, JSON schema, wire format and methodology.
#![recursion_limit = "256"]

mod acct;
mod capture;
mod hist;
mod mix;
mod proto;
mod recv;
mod send;
mod sys;
mod tracker;

use std::io::Write;
use std::net::IpAddr;

use mix::Mix;
use send::Rate;
use sys::Clock;

/// A user-facing error: printed as `tunbench-loadgen: <problem> (<fix>)`, exit 2.
#[derive(Debug)]
pub struct CliError {
    pub problem: String,
    pub fix: String,
}

impl CliError {
    pub fn new(problem: impl Into<String>, fix: impl Into<String>) -> CliError {
        CliError {
            problem: problem.into(),
            fix: fix.into(),
        }
    }
}

const USAGE: &str = "\
usage:
  tunbench-loadgen recv --bind ADDR --port P [--ports-count K] [--timeout-idle SECS]
                        [--max-seconds S] [--drain-ms MS] [--batch B] [--rcvbuf BYTES]
                        [--clock monotonic|realtime] [--per-flow] [--busy-poll-us US] [--idle-sleep-us US] [--cpu N]
                        [--capture [--ring-mb MB]]
  tunbench-loadgen send --dst ADDR[,ADDR...] --port P [--ports-count K] [--src ADDR[,ADDR...]]
                        [--src-port BASE] [--src-ports SP] [--flows N] [--size BYTES | --imix simple | --mix SIZE:WEIGHT,... | --genome LETTERS]
                        [--rate-pps R | --rate-bps R] [--duration SECS] [--batch B] [--seed S]
                        [--clock monotonic|realtime] [--sndbuf BYTES] [--end-rounds N] [--end-gap-ms MS] [--cpu N] [--gso]
                        [--threads N [--cpus C0,C1,...]]
  sizes are IP total lengths; rates accept k/M/G suffixes (decimal); bps counts L3 bytes";

/// Minimal `--key value` / `--key=value` parser.
struct Args {
    items: Vec<(String, Option<String>)>,
}

const FLAGS: &[&str] = &["--per-flow", "--gso", "--capture", "--help", "-h"];

impl Args {
    fn parse(raw: &[String]) -> Result<Args, CliError> {
        let mut items = Vec::new();
        let mut i = 0;
        while i < raw.len() {
            let a = &raw[i];
            if !a.starts_with('-') {
                return Err(CliError::new(
                    format!("unexpected argument '{a}'"),
                    "options are given as --name VALUE",
                ));
            }
            if let Some((k, v)) = a.split_once('=') {
                items.push((k.to_string(), Some(v.to_string())));
            } else if FLAGS.contains(&a.as_str()) {
                items.push((a.clone(), None));
            } else {
                let v = raw
                    .get(i + 1)
                    .ok_or_else(|| CliError::new(format!("option {a} needs a value"), format!("write {a} VALUE")))?;
                items.push((a.clone(), Some(v.clone())));
                i += 1;
            }
            i += 1;
        }
        Ok(Args { items })
    }

    fn check_known(&self, known: &[&str]) -> Result<(), CliError> {
        for (k, _) in &self.items {
            if !known.contains(&k.as_str()) && k != "--help" && k != "-h" {
                return Err(CliError::new(format!("unknown option {k}"), "see tunbench-loadgen --help"));
            }
        }
        Ok(())
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.items.iter().rev().find(|(k, _)| k == key).and_then(|(_, v)| v.as_deref())
    }
    fn has(&self, key: &str) -> bool {
        self.items.iter().any(|(k, _)| k == key)
    }

    fn parse_or<T: std::str::FromStr>(&self, key: &str, default: T, what: &str) -> Result<T, CliError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| CliError::new(format!("invalid {key} '{v}'"), format!("{key} takes {what}"))),
        }
    }

    fn required<T: std::str::FromStr>(&self, key: &str, what: &str) -> Result<T, CliError> {
        match self.get(key) {
            None => Err(CliError::new(format!("missing {key}"), format!("add {key} {what}"))),
            Some(v) => v
                .parse()
                .map_err(|_| CliError::new(format!("invalid {key} '{v}'"), format!("{key} takes {what}"))),
        }
    }
}

/// Parse `1.5M`, `100k`, `2G`, `250000` (decimal SI suffixes).
pub fn parse_rate(s: &str) -> Option<f64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()? {
        'k' | 'K' => (&s[..s.len() - 1], 1e3),
        'm' | 'M' => (&s[..s.len() - 1], 1e6),
        'g' | 'G' => (&s[..s.len() - 1], 1e9),
        _ => (s, 1.0),
    };
    let v: f64 = num.parse().ok()?;
    if v.is_finite() && v > 0.0 { Some(v * mult) } else { None }
}

fn parse_clock(a: &Args) -> Result<Clock, CliError> {
    match a.get("--clock") {
        None => Ok(Clock::Monotonic),
        Some(v) => Clock::parse(v).ok_or_else(|| CliError::new(format!("invalid --clock '{v}'"), "use monotonic or realtime")),
    }
}

fn parse_positive_secs(a: &Args, key: &str, default: f64) -> Result<f64, CliError> {
    let v: f64 = a.parse_or(key, default, "a number of seconds")?;
    if !v.is_finite() || v < 0.0 {
        return Err(CliError::new(
            format!("invalid {key} '{v}'"),
            format!("{key} takes a non-negative number of seconds"),
        ));
    }
    Ok(v)
}

fn parse_mix(a: &Args) -> Result<Mix, CliError> {
    let given: Vec<&str> = ["--size", "--imix", "--mix", "--genome"].into_iter().filter(|k| a.has(k)).collect();
    if given.len() > 1 {
        return Err(CliError::new(
            format!("conflicting size options {}", given.join(", ")),
            "give only one of --size, --imix, --mix, --genome",
        ));
    }
    let r = match given.first().copied() {
        None => Mix::fixed("64"),
        Some("--size") => Mix::fixed(a.get("--size").unwrap()),
        Some("--imix") => Mix::imix(a.get("--imix").unwrap()),
        Some("--mix") => Mix::weighted(a.get("--mix").unwrap()),
        Some(_) => Mix::genome(a.get("--genome").unwrap()),
    };
    r.map_err(|e| CliError::new(e, "see README: --size 64 | --imix simple | --mix 40:7,576:4,1500:1 | --genome aaag"))
}

fn apply_cpu(a: &Args) -> Result<(), CliError> {
    if let Some(v) = a.get("--cpu") {
        let cpu: usize = v
            .parse()
            .map_err(|_| CliError::new(format!("invalid --cpu '{v}'"), "--cpu takes a CPU number"))?;
        sys::pin_cpu(cpu)
            .map_err(|e| CliError::new(format!("cannot pin to CPU {cpu}: {e}"), "use a CPU listed by nproc / taskset -p $$"))?;
    }
    Ok(())
}

fn parse_cpus(a: &Args) -> Result<Vec<usize>, CliError> {
    match a.get("--cpus") {
        None => Ok(Vec::new()),
        Some(v) => v
            .split(',')
            .map(|c| c.trim().parse::<usize>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| CliError::new(format!("invalid --cpus '{v}'"), "--cpus takes CPU numbers like 0,1")),
    }
}

/// "A" or "A,B,C" (each an IPv4 or IPv6 address); None = empty.
fn addr_list(v: Option<&str>, name: &str) -> Result<Vec<IpAddr>, CliError> {
    let Some(v) = v else { return Ok(Vec::new()) };
    let mut out: Vec<IpAddr> = Vec::new();
    for item in v.split(',') {
        let addr: IpAddr = item.trim().parse().map_err(|_| {
            CliError::new(format!("invalid {name} '{}'", item.trim()), format!("{name} takes IPv4 or IPv6 addresses separated by commas"))
        })?;
        if out.contains(&addr) {
            return Err(CliError::new(format!("{name} lists {addr} twice"), "give each address once"));
        }
        out.push(addr);
    }
    Ok(out)
}

fn cmd_send(a: &Args) -> Result<serde_json::Value, CliError> {
    a.check_known(&[
        "--dst",
        "--port",
        "--ports-count",
        "--src",
        "--src-port",
        "--src-ports",
        "--flows",
        "--size",
        "--imix",
        "--mix",
        "--genome",
        "--rate-pps",
        "--rate-bps",
        "--duration",
        "--batch",
        "--seed",
        "--clock",
        "--sndbuf",
        "--end-rounds",
        "--end-gap-ms",
        "--cpu",
        "--gso",
        "--threads",
        "--cpus",
    ])?;
    apply_cpu(a)?;
    let dsts = addr_list(a.get("--dst"), "--dst")?;
    if dsts.is_empty() {
        return Err(CliError::new("missing --dst", "--dst takes an IPv4 or IPv6 address, or several separated by commas"));
    }
    let port: u16 = a.required("--port", "a UDP port 1-65535")?;
    if port == 0 {
        return Err(CliError::new("--port 0 is not a valid destination", "use a port 1-65535"));
    }
    let ports_count: u16 = a.parse_or("--ports-count", 1, "a count 1-65535")?;
    let srcs = addr_list(a.get("--src"), "--src")?;
    let src_ports: Option<u32> = match a.get("--src-ports") {
        None => None,
        Some(v) => match v.parse::<u32>() {
            Ok(c) if (1..=65535).contains(&c) => Some(c),
            _ => return Err(CliError::new(format!("invalid --src-ports '{v}'"), "--src-ports takes a count 1-65535")),
        },
    };
    let src_port: Option<u16> = match a.get("--src-port") {
        None => None,
        Some(v) => Some(
            v.parse()
                .map_err(|_| CliError::new(format!("invalid --src-port '{v}'"), "--src-port takes a port 1-65535"))?,
        ),
    };
    let flows: u32 = a.parse_or("--flows", 1, "a count >= 1")?;
    if flows == 0 || flows > 65535 {
        return Err(CliError::new(format!("invalid --flows {flows}"), "use 1..65535 flows"));
    }
    if ports_count == 0 {
        return Err(CliError::new("--ports-count 0", "use --ports-count >= 1"));
    }
    let mix = parse_mix(a)?;
    let rate = match (a.get("--rate-pps"), a.get("--rate-bps")) {
        (Some(_), Some(_)) => return Err(CliError::new("both --rate-pps and --rate-bps given", "give only one rate")),
        (Some(v), None) => {
            Rate::Pps(parse_rate(v).ok_or_else(|| CliError::new(format!("invalid --rate-pps '{v}'"), "use a positive number, e.g. 100k"))?)
        }
        (None, Some(v)) => Rate::BpsL3(
            parse_rate(v).ok_or_else(|| CliError::new(format!("invalid --rate-bps '{v}'"), "use a positive number, e.g. 1.5G"))?,
        ),
        (None, None) => Rate::Unpaced,
    };
    let duration_s = parse_positive_secs(a, "--duration", 10.0)?;
    let batch: usize = a.parse_or("--batch", 32, "a count 1-1024")?;
    if !(1..=1024).contains(&batch) {
        return Err(CliError::new(format!("invalid --batch {batch}"), "use 1..1024"));
    }
    let cfg = send::SendCfg {
        dsts,
        port,
        ports_count,
        srcs,
        src_port,
        src_ports,
        flows,
        mix,
        rate,
        duration_s,
        batch,
        seed: a.parse_or("--seed", 1, "an unsigned integer")?,
        clock: parse_clock(a)?,
        sndbuf: a.parse_or("--sndbuf", 4 << 20, "a byte count")?,
        end_rounds: a.parse_or::<u32>("--end-rounds", 3, "a count 0-10")?.min(10),
        end_gap_ms: a.parse_or("--end-gap-ms", 20, "milliseconds")?,
        gso: a.has("--gso"),
        threads: a.parse_or("--threads", 1, "a count 1-64")?,
        cpus: parse_cpus(a)?,
    };
    if !(1..=64).contains(&cfg.threads) {
        return Err(CliError::new(format!("invalid --threads {}", cfg.threads), "use 1..64"));
    }
    send::run(&cfg)
}

fn cmd_recv(a: &Args) -> Result<serde_json::Value, CliError> {
    a.check_known(&[
        "--bind",
        "--port",
        "--ports-count",
        "--timeout-idle",
        "--max-seconds",
        "--drain-ms",
        "--batch",
        "--clock",
        "--rcvbuf",
        "--busy-poll-us",
        "--idle-sleep-us",
        "--cpu",
        "--per-flow",
        "--capture",
        "--ring-mb",
    ])?;
    apply_cpu(a)?;
    let bind: IpAddr = a.required("--bind", "an IPv4 or IPv6 address (0.0.0.0 / :: for any)")?;
    let port: u16 = a.required("--port", "a UDP port 1-65535")?;
    let ports_count: u16 = a.parse_or("--ports-count", 1, "a count 1-65535")?;
    if ports_count == 0 || port == 0 {
        return Err(CliError::new(
            "--port and --ports-count must be >= 1",
            "use e.g. --port 5201 --ports-count 1",
        ));
    }
    let batch: usize = a.parse_or("--batch", 64, "a count 1-1024")?;
    if !(1..=1024).contains(&batch) {
        return Err(CliError::new(format!("invalid --batch {batch}"), "use 1..1024"));
    }
    let cfg = recv::RecvCfg {
        bind,
        port,
        ports_count,
        timeout_idle_s: parse_positive_secs(a, "--timeout-idle", 5.0)?,
        max_seconds: parse_positive_secs(a, "--max-seconds", 0.0)?,
        drain_ms: a.parse_or("--drain-ms", 300, "milliseconds")?,
        batch,
        clock: parse_clock(a)?,
        rcvbuf: a.parse_or("--rcvbuf", 16 << 20, "a byte count")?,
        per_flow: a.has("--per-flow"),
        busy_poll_us: a.parse_or("--busy-poll-us", 0, "microseconds")?,
        idle_sleep_us: a.parse_or("--idle-sleep-us", 200, "microseconds")?,
        capture: a.has("--capture"),
        ring_mb: a.parse_or("--ring-mb", 64, "MiB 1-1024")?,
    };
    recv::run(&cfg)
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let result = match argv.first().map(|s| s.as_str()) {
        Some("send") | Some("recv") if argv[1..].iter().any(|x| x == "--help" || x == "-h") => {
            println!("{USAGE}");
            return;
        }
        Some("--help") | Some("-h") | Some("help") => {
            println!("{USAGE}");
            return;
        }
        Some("--version") => {
            println!("tunbench-loadgen {}", env!("CARGO_PKG_VERSION"));
            return;
        }
        Some(cmd @ ("send" | "recv")) => {
            sys::install_stop_handlers();
            Args::parse(&argv[1..]).and_then(|a| if cmd == "send" { cmd_send(&a) } else { cmd_recv(&a) })
        }
        Some(other) => Err(CliError::new(format!("unknown subcommand '{other}'"), "use 'send' or 'recv'")),
        None => Err(CliError::new(
            "missing subcommand",
            "use 'tunbench-loadgen send ...' or 'tunbench-loadgen recv ...'",
        )),
    };
    match result {
        Ok(v) => {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", serde_json::to_string(&v).unwrap());
            let _ = out.flush();
        }
        Err(e) => {
            eprintln!("tunbench-loadgen: {} ({})", e.problem, e.fix);
            std::process::exit(2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(parse_rate("100k"), Some(100_000.0));
        assert_eq!(parse_rate("1.5M"), Some(1_500_000.0));
        assert_eq!(parse_rate("2G"), Some(2e9));
        assert_eq!(parse_rate("250000"), Some(250_000.0));
        assert_eq!(parse_rate("0"), None);
        assert_eq!(parse_rate("-3"), None);
        assert_eq!(parse_rate("fast"), None);
        assert_eq!(parse_rate(""), None);
    }

    #[test]
    fn args_and_mix_selection() {
        let raw: Vec<String> = ["--size", "64", "--flows=100", "--per-flow"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let a = Args::parse(&raw).unwrap();
        assert_eq!(a.get("--flows"), Some("100"));
        assert!(a.has("--per-flow"));
        assert_eq!(parse_mix(&a).unwrap().cycle, vec![64]);
        let raw: Vec<String> = ["--size", "64", "--imix", "simple"].iter().map(|s| s.to_string()).collect();
        assert!(parse_mix(&Args::parse(&raw).unwrap()).is_err());
        let raw: Vec<String> = ["--imix", "simple"].iter().map(|s| s.to_string()).collect();
        assert_eq!(parse_mix(&Args::parse(&raw).unwrap()).unwrap().kind, "imix-simple");
        let raw: Vec<String> = ["--port"].iter().map(|s| s.to_string()).collect();
        assert!(Args::parse(&raw).is_err());
    }

    #[test]
    fn size_minimums() {
        let m = Mix::fixed("39").unwrap();
        assert!(send::validate_sizes(&m, false).is_err());
        assert!(send::validate_sizes(&Mix::fixed("40").unwrap(), false).is_ok());
        assert!(send::validate_sizes(&Mix::fixed("59").unwrap(), true).is_err());
        assert!(send::validate_sizes(&Mix::fixed("60").unwrap(), true).is_ok());
        // simple IMIX has 40-byte packets: impossible over IPv6
        assert!(send::validate_sizes(&Mix::imix("simple").unwrap(), true).is_err());
    }
}
