//! Results: the run report, its one-line JSON and human forms, and the
//! generator's own CPU time.

use hdrhistogram::Histogram;

/// The generator's own CPU time so far, from `/proc/self/stat`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuTime {
    /// User time, seconds.
    pub user_s: f64,
    /// System time, seconds.
    pub sys_s: f64,
}

/// Clock ticks per second of `/proc/<pid>/stat`'s times: USER_HZ, which the
/// kernel fixes at 100 for user space on every architecture Linux supports
/// in practice (what `getconf CLK_TCK` prints).
const USER_HZ: f64 = 100.0;

impl CpuTime {
    /// This process's CPU time, or zeros where `/proc` is missing.
    pub fn now() -> CpuTime {
        std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|s| CpuTime::parse_stat(&s))
            .unwrap_or_default()
    }

    /// Another process's CPU time (all its threads), if it can be read.
    pub fn of_pid(pid: u32) -> Option<CpuTime> {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| CpuTime::parse_stat(&s))
    }

    /// Parses utime and stime (fields 14 and 15) of a `/proc/<pid>/stat` line.
    /// The command name (field 2) may hold spaces and parentheses, so fields are
    /// counted from the last `)`.
    pub fn parse_stat(line: &str) -> Option<CpuTime> {
        let rest = &line[line.rfind(')')? + 1..];
        let mut fields = rest.split_whitespace();
        // After ')' come field 3 (state) onwards: utime is the 12th of them.
        let utime: f64 = fields.nth(11)?.parse().ok()?;
        let stime: f64 = fields.next()?.parse().ok()?;
        Some(CpuTime {
            user_s: utime / USER_HZ,
            sys_s: stime / USER_HZ,
        })
    }

    /// The CPU time spent between `earlier` and `self`.
    pub fn since(self, earlier: CpuTime) -> CpuTime {
        CpuTime {
            user_s: (self.user_s - earlier.user_s).max(0.0),
            sys_s: (self.sys_s - earlier.sys_s).max(0.0),
        }
    }
}

/// The CPU time of several processes together (the members of an ensemble).
impl std::iter::Sum for CpuTime {
    fn sum<I: Iterator<Item = CpuTime>>(iter: I) -> CpuTime {
        iter.fold(CpuTime::default(), |a, b| CpuTime {
            user_s: a.user_s + b.user_s,
            sys_s: a.sys_s + b.sys_s,
        })
    }
}

/// The number of cores the machine offers this process.
pub fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Latency percentiles in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Percentiles {
    /// Median.
    pub p50_us: u64,
    /// 90th percentile.
    pub p90_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// 99.9th percentile.
    pub p999_us: u64,
    /// Largest.
    pub max_us: u64,
}

impl Percentiles {
    /// The percentiles of `h` (zeros if it is empty).
    pub fn of(h: &Histogram<u64>) -> Percentiles {
        if h.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            p50_us: h.value_at_quantile(0.50),
            p90_us: h.value_at_quantile(0.90),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
        }
    }
}

/// The result of `rzk-bench run`.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// Workload name.
    pub workload: &'static str,
    /// The server as given.
    pub server: String,
    /// Sessions used in the timed phase.
    pub sessions: usize,
    /// Requests in flight per session.
    pub inflight: usize,
    /// Size of every value written.
    pub value_bytes: usize,
    /// Operations answered as expected in the timed phase.
    pub ops: u64,
    /// Wrong answers and failures (anywhere in the run, cleanup included).
    pub errors: u64,
    /// Wall time of the timed phase.
    pub seconds: f64,
    /// Latency of the timed phase's operations.
    pub latency: Percentiles,
    /// The generator's CPU time during the timed phase.
    pub cpu: CpuTime,
    /// The server's CPU time during the timed phase (`--server-pid`).
    pub server_cpu: Option<CpuTime>,
    /// Cores available, for `cpu_share`.
    pub cores: usize,
    /// The first error messages (all errors are counted in `errors`).
    pub messages: Vec<String>,
    /// The namespace the run used.
    pub namespace: String,
    /// The seed of the run's random choices.
    pub seed: u64,
    /// Open loop (`--rate`): the operations per second offered; latency then
    /// counts from each operation's due time.
    pub offered_rate: Option<f64>,
}

impl Report {
    /// Operations per second of the timed phase.
    pub fn ops_per_sec(&self) -> f64 {
        if self.seconds > 0.0 {
            self.ops as f64 / self.seconds
        } else {
            0.0
        }
    }

    /// (user + sys) / (seconds × cores).
    pub fn cpu_share(&self) -> f64 {
        let wall = self.seconds * self.cores.max(1) as f64;
        if wall > 0.0 {
            (self.cpu.user_s + self.cpu.sys_s) / wall
        } else {
            0.0
        }
    }

    /// The server's CPU time per operation in µs (`--server-pid`).
    pub fn server_cpu_us_per_op(&self) -> Option<f64> {
        let cpu = self.server_cpu?;
        (self.ops > 0).then(|| (cpu.user_s + cpu.sys_s) * 1e6 / self.ops as f64)
    }

    /// The one JSON line of `--json` (see `cli-spec`), without newline. With
    /// `--server-pid`, three fields follow the contract's:
    /// `server_cpu_user_s`, `server_cpu_sys_s`, `server_cpu_us_per_op`.
    pub fn to_json(&self) -> String {
        // Written by hand to keep the contract's key order; strings go
        // through serde_json for escaping.
        let text = |s: &str| serde_json::Value::from(s).to_string();
        format!(
            "{{\"workload\":{},\"server\":{},\"sessions\":{},\"inflight\":{},\"value_bytes\":{},\
             \"ops\":{},\"errors\":{},\"seconds\":{},\"ops_per_sec\":{},\"p50_us\":{},\"p90_us\":{},\
             \"p99_us\":{},\"p999_us\":{},\"max_us\":{},\"cpu_user_s\":{},\"cpu_sys_s\":{},\"cpu_share\":{}}}",
            text(self.workload),
            text(&self.server),
            self.sessions,
            self.inflight,
            self.value_bytes,
            self.ops,
            self.errors,
            number(round(self.seconds, 3)),
            number(round(self.ops_per_sec(), 1)),
            self.latency.p50_us,
            self.latency.p90_us,
            self.latency.p99_us,
            self.latency.p999_us,
            self.latency.max_us,
            number(round(self.cpu.user_s, 2)),
            number(round(self.cpu.sys_s, 2)),
            number(round(self.cpu_share(), 3)),
        )
        .trim_end_matches('}')
        .to_owned()
            + &match self.server_cpu {
                None => String::new(),
                Some(s) => format!(
                    ",\"server_cpu_user_s\":{},\"server_cpu_sys_s\":{},\"server_cpu_us_per_op\":{}",
                    number(round(s.user_s, 2)),
                    number(round(s.sys_s, 2)),
                    number(round(self.server_cpu_us_per_op().unwrap_or(0.0), 2)),
                ),
            }
            + &match self.offered_rate {
                None => String::new(),
                Some(r) => format!(",\"offered_ops_per_sec\":{}", number(round(r, 1))),
            }
            + "}"
    }

    /// The human summary block.
    pub fn to_human(&self) -> String {
        let l = &self.latency;
        let offered = match self.offered_rate {
            None => String::new(),
            Some(r) => format!(
                "\n  offered    {r:.1} ops/s (open loop: latency from each operation's due time)"
            ),
        };
        format!(
            "rzk-bench run {workload} against {server}\n\
             \x20 sessions {sessions}, inflight {inflight}, value {value_bytes} B, namespace {ns}, seed {seed}\n\
             \x20 ops        {ops} in {seconds:.2} s = {rate:.1} ops/s{offered}\n\
             \x20 errors     {errors}\n\
             \x20 latency us p50 {p50}  p90 {p90}  p99 {p99}  p99.9 {p999}  max {max}\n\
             \x20 cpu        user {user:.2} s  sys {sys:.2} s  share {share:.1}% of {cores} cores",
            workload = self.workload,
            server = self.server,
            sessions = self.sessions,
            inflight = self.inflight,
            value_bytes = self.value_bytes,
            ns = self.namespace,
            seed = self.seed,
            ops = self.ops,
            seconds = self.seconds,
            rate = self.ops_per_sec(),
            errors = self.errors,
            p50 = l.p50_us,
            p90 = l.p90_us,
            p99 = l.p99_us,
            p999 = l.p999_us,
            max = l.max_us,
            user = self.cpu.user_s,
            sys = self.cpu.sys_s,
            share = self.cpu_share() * 100.0,
            cores = self.cores,
        )
    }
}

/// A finite JSON number (NaN or infinity would not be JSON).
fn number(x: f64) -> serde_json::Value {
    serde_json::Number::from_f64(x)
        .map(serde_json::Value::Number)
        .unwrap_or(serde_json::Value::from(0))
}

/// `x` rounded to `digits` decimals, for short JSON.
fn round(x: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (x * scale).round() / scale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_times_are_read_after_the_last_parenthesis() {
        // A command name with a space and a ')' must not shift the fields.
        let line =
            "4242 (rzk bench) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 3 0 1 2 3";
        let cpu = CpuTime::parse_stat(line).unwrap();
        assert_eq!(
            cpu,
            CpuTime {
                user_s: 2.5,
                sys_s: 0.75
            }
        );
    }

    #[test]
    fn json_has_exactly_the_contract_fields() {
        let report = Report {
            workload: "get",
            server: "127.0.0.1:2181".into(),
            sessions: 2,
            inflight: 4,
            value_bytes: 128,
            ops: 1000,
            errors: 0,
            seconds: 2.0,
            latency: Percentiles {
                p50_us: 10,
                p90_us: 20,
                p99_us: 30,
                p999_us: 40,
                max_us: 50,
            },
            cpu: CpuTime {
                user_s: 0.5,
                sys_s: 0.5,
            },
            cores: 2,
            messages: vec![],
            namespace: "/ns".into(),
            seed: 1,
            offered_rate: None,
            server_cpu: None,
        };
        let line = report.to_json();
        assert!(!line.contains('\n'));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        let keys: Vec<&str> = line
            .trim_matches(|c| c == '{' || c == '}')
            .split(',')
            .map(|kv| kv.split(':').next().unwrap().trim_matches('"'))
            .collect();
        let expected = vec![
            "workload",
            "server",
            "sessions",
            "inflight",
            "value_bytes",
            "ops",
            "errors",
            "seconds",
            "ops_per_sec",
            "p50_us",
            "p90_us",
            "p99_us",
            "p999_us",
            "max_us",
            "cpu_user_s",
            "cpu_sys_s",
            "cpu_share",
        ];
        // The contract's fields, in the contract's order.
        assert_eq!(keys, expected);
        assert_eq!(v.as_object().unwrap().len(), expected.len());
        assert_eq!(v["ops_per_sec"], 500.0);
        assert_eq!(v["cpu_share"], 0.25);
        // With the server's CPU time, three fields follow.
        let with = Report {
            server_cpu: Some(CpuTime {
                user_s: 0.3,
                sys_s: 0.1,
            }),
            ..report
        };
        let v: serde_json::Value = serde_json::from_str(&with.to_json()).unwrap();
        assert_eq!(v.as_object().unwrap().len(), expected.len() + 3);
        assert_eq!(v["server_cpu_user_s"], 0.3);
        assert_eq!(v["server_cpu_us_per_op"], 400.0);
    }
}
