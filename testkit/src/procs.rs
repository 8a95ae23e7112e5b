//! Stopping a child process the way a test means it: every thread stopped.
//!
//! `kill -STOP` returns once the signal is sent, but each thread of the target
//! stops on its own when it next handles it; until then it keeps running. A
//! test that stops a member and then acts (sends a write the member must not
//! see) can race a thread still reading its socket and writing its log.
//! [`stop`] returns only once every thread is stopped.
//!
//! ```no_run
//! let mut child = std::process::Command::new("sleep").arg("60").spawn().unwrap();
//! rzk_testkit::procs::stop(child.id());
//! assert!(rzk_testkit::procs::all_threads_stopped(child.id()));
//! child.kill().unwrap();
//! ```

use std::process::Command;
use std::time::{Duration, Instant};

/// Sends SIGSTOP to `pid` and waits (10 s at most, then panics) until every
/// one of its threads is stopped.
pub fn stop(pid: u32) {
    let ok = Command::new("kill")
        .args(["-STOP", &pid.to_string()])
        .status()
        .expect("running kill")
        .success();
    assert!(ok, "kill -STOP {pid}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !all_threads_stopped(pid) {
        assert!(
            Instant::now() < deadline,
            "pid {pid} did not stop within 10 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Whether every thread of `pid` is stopped (state `T` or `t` in
/// `/proc/<pid>/task/<tid>/stat`, the field after the parenthesised name).
/// `false` for a process that does not exist.
pub fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|t| {
        std::fs::read_to_string(t.path().join("stat")).is_ok_and(|stat| {
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next())
                .is_some_and(|state| state == 'T' || state == 't')
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_process_has_every_thread_stopped_and_a_running_one_not() {
        // A shell whose `sleep` child is the process signalled; one thread.
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        assert!(!all_threads_stopped(pid), "running");
        stop(pid);
        assert!(all_threads_stopped(pid), "stopped");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!all_threads_stopped(pid), "gone");
    }
}
