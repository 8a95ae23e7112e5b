//! The `rzk` binary with observer lines that do not fit together: a clear
//! message naming the lines and exit status 2, as for any bad zoo.cfg. Where
//! ZooKeeper 3.8 only warns (a `peerType` that disagrees with the member's own
//! `server.N` line: it logs "Peer type from servers list ... doesn't match
//! peerType ... Defaulting to servers list" and carries on), rzk refuses.
mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::procs::{procs, Layout};

/// Runs the binary on `cfg` to its exit; one that is still running after 20 s
/// (it took the configuration and is looking for its ensemble) is killed and
/// fails the test.
fn run_to_exit(cfg: &Path) -> (Option<i32>, String) {
    let stderr = cfg.with_file_name("stderr.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_rzk"))
        .arg(cfg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!(
                "rzk took {} and ran for 20 s instead of exiting:\n{}",
                cfg.display(),
                std::fs::read_to_string(&stderr).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (
        status.code(),
        std::fs::read_to_string(&stderr).unwrap_or_default(),
    )
}

/// Rewrites a zoo.cfg through `edit`.
fn edit(cfg: &Path, edit: impl FnOnce(String) -> String) {
    let text = std::fs::read_to_string(cfg).unwrap();
    std::fs::write(cfg, edit(text)).unwrap();
}

#[test]
fn an_observer_without_peer_type_observer_exits_2_naming_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let ens = procs(dir.path(), &Layout::voters(3).observers(1));
    let observer = &ens.members[3];
    edit(&observer.cfg, |t| t.replace("peerType=observer\n", ""));
    let (code, err) = run_to_exit(&observer.cfg);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("server.4 (") && err.contains("zoo.cfg line"),
        "names the line: {err}"
    );
    assert!(err.contains("add peerType=observer"), "{err}");
}

#[test]
fn peer_type_observer_on_a_participant_line_exits_2_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let ens = procs(dir.path(), &Layout::voters(3).observers(1));
    let voter = &ens.members[1];
    edit(&voter.cfg, |t| format!("{t}peerType=observer\n"));
    let (code, err) = run_to_exit(&voter.cfg);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("server.2 (") && err.contains("says peerType=observer"),
        "names both lines: {err}"
    );
}

#[test]
fn observers_without_a_quorum_of_participants_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    // One participant and one observer: ZooKeeper 3.8 refuses it too
    // ("Observers w/o quorum is an invalid configuration").
    let ens = procs(dir.path(), &Layout::voters(1).observers(1));
    for m in &ens.members {
        let (code, err) = run_to_exit(&m.cfg);
        assert_eq!(code, Some(2), "member {}: {err}", m.id);
        assert!(
            err.contains("w/o quorum") && err.contains("server.2 ("),
            "member {}: {err}",
            m.id
        );
    }
}

/// A bad `observerMasterPort` stops the start with exit status 2 and names
/// the key and its line.
#[test]
fn a_bad_observer_master_port_exits_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let ens = procs(dir.path(), &Layout::voters(3).observers(1));
    for (m, bad) in [
        (1, "observerMasterPort=0"),
        (3, "observerMasterPort.4=2191"),
    ] {
        let cfg = &ens.members[m].cfg;
        edit(cfg, |t| format!("{t}{bad}\n"));
        let (code, err) = run_to_exit(cfg);
        assert_eq!(code, Some(2), "{bad}: {err}");
        let key = bad.split('=').next().unwrap();
        assert!(err.contains(key), "{bad}: names the key: {err}");
    }
}
