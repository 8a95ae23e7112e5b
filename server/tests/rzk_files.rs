//! `rzk log dump` and `rzk snapshot dump` on rzk's own data directory: every
//! committed txn listed with its zxid, session, type and path, snapshots
//! printed after their checksum is checked, damage reported with the file and
//! offset, and nothing in the directory changed by a dump (read-only, even
//! where a start would cut a torn tail).
mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use support::four_letter;
use support::procs::Rzk;
use zookeeper_client as zk;

fn rzk(args: &[&std::ffi::OsStr]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rzk"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every file under `dir` with its bytes.
fn contents(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

fn files(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.starts_with(prefix) && !name.ends_with(".tmp")
        })
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn dumps_read_rzks_own_files_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Rzk::spawn(dir.path(), &["snapCount=10".to_owned()]);
    server.wait_ready().await;
    let c = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(4))
        .connect(&server.addr())
        .await
        .unwrap();
    let open = zk::Acls::anyone_all();
    let persistent = zk::CreateMode::Persistent.with_acls(open);
    c.create("/d", b"x", &persistent).await.unwrap();
    for i in 0..30 {
        c.create(&format!("/d/n{i}"), b"v", &persistent)
            .await
            .unwrap();
    }
    c.set_data("/d/n7", b"seven", None).await.unwrap();
    c.delete("/d/n3", None).await.unwrap();
    let mut m = c.new_multi_writer();
    m.add_create("/d/m", b"", &persistent).unwrap();
    m.add_set_data("/d/n4", b"four", None).unwrap();
    m.commit().await.unwrap();
    let data = dir.path().join("data");
    // Wait until a snapshot file is there (snapCount=10: one is due).
    let snap_dir = data.join("snap");
    let mut snaps = Vec::new();
    for _ in 0..200 {
        if snap_dir.is_dir() {
            snaps = files(&snap_dir, "snapshot.");
        }
        if !snaps.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!snaps.is_empty(), "no snapshot:\n{}", server.log_text());
    drop(c);
    // The dropped client's closeSession is committed before the server stops.
    let mut closed = false;
    for _ in 0..200 {
        if four_letter(&server.addr(), "mntr")
            .await
            .contains("zk_global_sessions\t0\n")
        {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(closed, "the session was not closed:\n{}", server.log_text());
    // Stop the server: the files are then what a dump reads.
    drop(server);

    let before = contents(&data);
    let (ok, out, err) = rzk(&["log".as_ref(), "dump".as_ref(), data.as_os_str()]);
    assert!(ok, "{err}\n{out}");
    let txns: Vec<&str> = out.lines().filter(|l| l.starts_with("zxid ")).collect();
    for needle in [
        " createSession timeout",
        " create /d/n29",
        " setData /d/n7",
        " delete /d/n3",
        " multi create:/d/m setData:/d/n4",
        " closeSession",
    ] {
        assert!(
            txns.iter().any(|l| l.contains(needle)),
            "no {needle:?} in\n{out}"
        );
    }
    // Zxids strictly increase across segments.
    let zxids: Vec<u64> = txns
        .iter()
        .map(|l| {
            let z = l.split_whitespace().nth(1).unwrap();
            u64::from_str_radix(z.trim_start_matches("0x"), 16).unwrap()
        })
        .collect();
    assert!(zxids.windows(2).all(|w| w[0] < w[1]), "{out}");

    let newest = snaps.last().unwrap();
    let (ok, out, err) = rzk(&["snapshot".as_ref(), "dump".as_ref(), newest.as_os_str()]);
    assert!(ok, "{err}");
    assert!(out.starts_with("rzk snapshot "), "{out}");
    assert!(
        out.contains("\n/d\n") && out.contains("\n/zookeeper\n"),
        "{out}"
    );
    let (ok, summary, err) = rzk(&[
        "snapshot".as_ref(),
        "dump".as_ref(),
        "--summary".as_ref(),
        newest.as_os_str(),
    ]);
    assert!(ok, "{err}");
    assert!(summary.contains("znodes: "), "{summary}");
    assert!(!summary.contains("\n/d\n"), "{summary}");
    assert_eq!(contents(&data), before, "a dump changed the data directory");

    // A flipped byte in a snapshot: its checksum fails, named with the file.
    let bad = dir.path().join("snapshot.bad");
    let mut bytes = std::fs::read(newest).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x20;
    std::fs::write(&bad, &bytes).unwrap();
    let (ok, _, err) = rzk(&["snapshot".as_ref(), "dump".as_ref(), bad.as_os_str()]);
    assert!(!ok);
    assert!(err.contains("snapshot.bad"), "{err}");

    // A torn tail on the newest segment: reported with its offset, listed as
    // what a start would cut, and the file left as it was.
    let log_dir = data.join("log");
    let seg = files(&log_dir, "log.").pop().unwrap();
    let mut seg_bytes = std::fs::read(&seg).unwrap();
    // Past the last record (its last bytes may be zeros), inside the
    // preallocated zeros: what a crash in the middle of an append leaves.
    let end = seg_bytes.iter().rposition(|b| *b != 0).unwrap() + 1;
    let torn_at = end + 64;
    assert!(
        seg_bytes.len() >= torn_at + 9,
        "the segment is preallocated"
    );
    seg_bytes[torn_at..torn_at + 9].copy_from_slice(&[7u8; 9]);
    std::fs::write(&seg, &seg_bytes).unwrap();
    let before = contents(&data);
    let (ok, out, err) = rzk(&["log".as_ref(), "dump".as_ref(), data.as_os_str()]);
    assert!(ok, "a torn tail is not an error: {err}\n{out}");
    assert!(
        out.contains("byte offset") && out.contains("torn tail"),
        "{out}"
    );
    assert_eq!(contents(&data), before, "a dump cut the torn tail");
}
