//! The `rzk` binary as an ensemble member with a bad configuration: a clear
//! message and exit status 2, as for any bad zoo.cfg key; and a member that
//! cannot reach a quorum, which keeps trying and says so instead of exiting.
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A port for a config line, held (`rzk_testkit::ports`) until the test
/// process ends: a port chosen and released could come back for the next
/// line, and two lines with one number fail the config for the wrong reason.
fn free_port() -> u16 {
    static HELD: Mutex<Vec<rzk_testkit::ports::Port>> = Mutex::new(Vec::new());
    let port = rzk_testkit::ports::reserve();
    let n = port.get();
    HELD.lock().unwrap().push(port);
    n
}

fn write_cfg(dir: &Path, myid: Option<u64>, servers: &str) -> std::path::PathBuf {
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    if let Some(id) = myid {
        std::fs::write(data.join("myid"), format!("{id}\n")).unwrap();
    }
    let cfg = dir.join("zoo.cfg");
    std::fs::write(
        &cfg,
        format!(
            "tickTime=100\ninitLimit=5\nsyncLimit=2\ndataDir={}\nclientPort={}\n\
             clientPortAddress=127.0.0.1\nadmin.enableServer=false\n{servers}",
            data.display(),
            free_port()
        ),
    )
    .unwrap();
    cfg
}

/// Runs the binary to its exit (it must exit within 20 s).
fn run_to_exit(cfg: &Path) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rzk"))
        .arg(cfg)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn lines(ids: &[u64]) -> String {
    ids.iter()
        .map(|id| format!("server.{id}=127.0.0.1:{}:{}\n", free_port(), free_port()))
        .collect()
}

#[test]
fn a_myid_outside_the_server_lines_exits_2_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_cfg(dir.path(), Some(7), &lines(&[1, 2, 3]));
    let (code, err) = run_to_exit(&cfg);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("myid is 7") && err.contains("1, 2, 3"),
        "{err}"
    );
}

#[test]
fn a_missing_myid_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_cfg(dir.path(), None, &lines(&[1, 2, 3]));
    let (code, err) = run_to_exit(&cfg);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("myid"), "{err}");
}

#[test]
fn a_duplicate_server_id_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let servers = format!("{}{}", lines(&[1, 2]), lines(&[2]));
    let cfg = write_cfg(dir.path(), Some(1), &servers);
    let (code, err) = run_to_exit(&cfg);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("server.2 is given twice"), "{err}");
}

#[test]
fn a_peer_host_that_does_not_resolve_exits_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let servers = format!(
        "{}server.2=no-such-host.invalid:{}:{}\n",
        lines(&[1]),
        free_port(),
        free_port()
    );
    let cfg = write_cfg(dir.path(), Some(1), &servers);
    let (code, err) = run_to_exit(&cfg);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("server.2") && err.contains("no-such-host.invalid"),
        "{err}"
    );
}

/// One member of three, alone: it cannot form a quorum, so it serves nobody,
/// keeps looking and says so in its log — it does not exit.
#[test]
fn a_member_without_a_quorum_keeps_trying_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_cfg(dir.path(), Some(1), &lines(&[1, 2, 3]));
    let log = dir.path().join("rzk.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_rzk"))
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let said = loop {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "the member exited ({status}):\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("no leader yet") {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "no 'no leader yet' line:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(said.contains("still trying"), "{said}");
    child.kill().unwrap();
    child.wait().unwrap();
}
