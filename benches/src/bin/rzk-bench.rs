//! `rzk-bench`: a load generator for any ZooKeeper-protocol endpoint.
//! See `benches/README.md` and the library `rzk_benches`.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use rzk_benches::cli::{Cli, Command};
use tokio_util::sync::CancellationToken;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rzk-bench: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dispatch(cli.command)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("rzk-bench: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs one subcommand; `Ok(false)` when it finished but found errors.
async fn dispatch(command: Command) -> anyhow::Result<bool> {
    match command {
        Command::Run(args) => run(args).await,
        Command::Populate(args) => populate(args).await,
        Command::IdleSessions(args) => idle(args).await,
        Command::WaitServing(args) => wait(args).await,
        Command::ConnectStorm(args) => connect_storm(args).await,
    }
}

/// A token cancelled on Ctrl-C or SIGTERM.
fn cancel_on_signals() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let terminated = async {
            match term.as_mut() {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminated => {}
        }
        eprintln!("rzk-bench: stopping (signal); cleaning up (a second Ctrl-C exits at once)");
        t.cancel();
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("rzk-bench: second signal; exiting without cleanup");
            std::process::exit(130);
        }
    });
    token
}

fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
}

fn print_errors(messages: &[String], errors: u64) {
    for m in messages {
        eprintln!("rzk-bench: error: {m}");
    }
    if errors as usize > messages.len() {
        eprintln!("rzk-bench: ... {} errors in total", errors);
    }
}

async fn run(args: rzk_benches::cli::RunArgs) -> anyhow::Result<bool> {
    let json = args.json;
    let opts = args.into_options(clock_seed())?;
    let cancel = cancel_on_signals();
    let report = rzk_benches::run::run(&opts, cancel)
        .await
        .with_context(|| format!("run {} against {}", opts.workload.name(), opts.server))?;
    print_errors(&report.messages, report.errors);
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", report.to_json())?;
    } else {
        writeln!(out, "{}", report.to_human())?;
    }
    Ok(report.errors == 0)
}

async fn populate(args: rzk_benches::cli::PopulateArgs) -> anyhow::Result<bool> {
    let json = args.json;
    let opts = args.into_options()?;
    let report = rzk_benches::populate::populate(&opts)
        .await
        .with_context(|| format!("populate {} on {}", opts.path, opts.server))?;
    print_errors(&report.messages, report.errors);
    if json {
        println!("{}", report.to_json());
    } else {
        println!(
            "populated {} znodes under {} in {:.2} s = {:.1} creates/s, errors {}",
            report.znodes,
            opts.path,
            report.seconds,
            report.ops_per_sec(),
            report.errors
        );
    }
    Ok(report.errors == 0)
}

/// Completes when stdin, if it is a pipe or socket, reaches EOF (a terminal,
/// a file or /dev/null never ends the hold: a script's background job often
/// has /dev/null as stdin).
async fn stdin_closed() {
    use std::os::unix::fs::FileTypeExt;
    let watchable = std::fs::metadata("/proc/self/fd/0")
        .map(|m| m.file_type().is_fifo() || m.file_type().is_socket())
        .unwrap_or(false);
    if !watchable {
        return std::future::pending().await;
    }
    use tokio::io::AsyncReadExt;
    let mut stdin = tokio::io::stdin();
    let mut buf = [0u8; 256];
    while let Ok(n) = stdin.read(&mut buf).await {
        if n == 0 {
            return;
        }
    }
}

async fn idle(args: rzk_benches::cli::IdleArgs) -> anyhow::Result<bool> {
    let opts = args.into_options()?;
    let cancel = cancel_on_signals();
    let release = async move {
        tokio::select! {
            _ = cancel.cancelled() => {}
            _ = stdin_closed() => {}
        }
    };
    let ready = |n: usize| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "READY {n}");
        let _ = out.flush();
    };
    let report = rzk_benches::idle::idle_sessions(&opts, ready, release)
        .await
        .with_context(|| format!("idle-sessions on {}", opts.server))?;
    print_errors(&report.messages, report.errors);
    eprintln!(
        "rzk-bench: closed {} sessions, errors {}",
        report.established, report.errors
    );
    Ok(report.errors == 0)
}

async fn wait(args: rzk_benches::cli::WaitArgs) -> anyhow::Result<bool> {
    let opts = args.into_options()?;
    let elapsed = rzk_benches::wait::wait_serving(&opts).await?;
    println!("{}", elapsed.as_millis());
    Ok(true)
}

async fn connect_storm(args: rzk_benches::cli::ConnectStormArgs) -> anyhow::Result<bool> {
    let json = args.json;
    let save = args.save_sessions.clone();
    let opts = args.into_options()?;
    let report = rzk_benches::connect_storm::connect_storm(&opts).await;
    print_errors(&report.messages, report.errors);
    if let Some(path) = save {
        let mut text = String::new();
        for s in &report.saved {
            text.push_str(&s.to_line());
            text.push('\n');
        }
        std::fs::write(&path, text)
            .with_context(|| format!("--save-sessions {}", path.display()))?;
    }
    if json {
        println!("{}", report.to_json());
    } else {
        println!(
            "{} sessions ({}) established {} at a time in {:.2} s = {:.0}/s; connect to first ping p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; errors {}",
            report.established,
            report.mode,
            report.parallelism,
            report.seconds,
            report.sessions_per_sec(),
            report.latency.p50_us as f64 / 1000.0,
            report.latency.p99_us as f64 / 1000.0,
            report.latency.max_us as f64 / 1000.0,
            report.errors
        );
    }
    Ok(report.errors == 0 && report.established as usize == report.sessions)
}
