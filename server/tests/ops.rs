//! Data tree operations, multi, ACLs, containers and TTL nodes (issue items
//! 2, 3 and 5), checked with exact error codes on the wire.
mod support;

use std::time::Duration;

use bytes::Bytes;
use rzk_wire::multi::{MultiOp, MultiResult};
use rzk_wire::{
    Acl, CheckVersionRequest, CreateRequest, CreateTtlRequest, DeleteRequest, ErrorCode, Id,
    MultiRequest, OpCode, Perms, Request, Response, SetAclRequest, SetDataRequest,
};
use support::*;

fn create_acl(path: &str, acl: Vec<Acl>, flags: i32) -> Request {
    Request::Create(CreateRequest {
        path: path.into(),
        data: None,
        acl,
        flags,
    })
}

fn digest_acl(perms: i32, user_pass: &str) -> Acl {
    Acl {
        perms: Perms(perms),
        id: Id {
            scheme: "digest".into(),
            id: rzk_server::acl::digest_identity(user_pass.as_bytes()).into(),
        },
    }
}

async fn err(raw: &mut Raw, req: Request) -> ErrorCode {
    match raw.call(req).await.result {
        Ok(r) => panic!("expected an error, got {r:?}"),
        Err(e) => e,
    }
}

#[tokio::test]
async fn create_validation_order_and_codes() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), &[]).await;
    let (mut raw, _) = Raw::connect(server.addr, 4000).await;
    assert_eq!(
        err(&mut raw, create_req("/a", b"", 7)).await,
        ErrorCode::BadArguments
    );
    assert_eq!(
        err(&mut raw, create_req("/a", b"", 5)).await,
        ErrorCode::BadArguments,
        "TTL mode via op 1"
    );
    assert_eq!(
        err(&mut raw, create_req("noslash", b"", 0)).await,
        ErrorCode::BadArguments
    );
    assert_eq!(
        err(&mut raw, create_acl("/a", vec![], 0)).await,
        ErrorCode::InvalidAcl
    );
    assert_eq!(
        err(&mut raw, create_req("/missing/x", b"", 0)).await,
        ErrorCode::NoNode
    );
    assert_eq!(
        err(&mut raw, create_req("/missing/", b"", 0)).await,
        ErrorCode::NoNode
    );
    assert!(raw.call(create_req("/p", b"", 0)).await.result.is_ok());
    assert_eq!(
        err(&mut raw, create_req("/p/", b"", 0)).await,
        ErrorCode::BadArguments
    );
    assert_eq!(
        err(&mut raw, create_req("/p", b"", 0)).await,
        ErrorCode::NodeExists
    );
    assert!(raw.call(create_req("/eph", b"", 1)).await.result.is_ok());
    assert_eq!(
        err(&mut raw, create_req("/eph/c", b"", 0)).await,
        ErrorCode::NoChildrenForEphemerals
    );
    // Sequential: suffix from the parent's create counter, "/p/" is legal.
    let r = raw.call(create_req("/p/", b"", 2)).await;
    let Ok(Response::Create(c)) = r.result else {
        panic!("{r:?}")
    };
    assert_eq!(&*c.path, "/p/0000000000");
    assert!(raw
        .call(Request::Delete(DeleteRequest {
            path: "/p/0000000000".into(),
            version: -1
        }))
        .await
        .result
        .is_ok());
    let r = raw.call(create_req("/p/s-", b"", 2)).await;
    let Ok(Response::Create(c)) = r.result else {
        panic!("{r:?}")
    };
    assert_eq!(
        &*c.path, "/p/s-0000000001",
        "the counter counts every create, never goes down"
    );
    let r = raw
        .call(Request::Exists(rzk_wire::ExistsRequest {
            path: "/p".into(),
            watch: false,
        }))
        .await;
    let Ok(Response::Stat(s)) = r.result else {
        panic!()
    };
    assert_eq!((s.cversion, s.num_children), (3, 1), "2 creates + 1 delete");
    // delete checks
    for p in ["/", "/zookeeper", "/zookeeper/config"] {
        assert_eq!(
            err(
                &mut raw,
                Request::Delete(DeleteRequest {
                    path: p.into(),
                    version: -1
                })
            )
            .await,
            ErrorCode::BadArguments
        );
    }
    assert_eq!(
        err(
            &mut raw,
            Request::Delete(DeleteRequest {
                path: "/p".into(),
                version: -1
            })
        )
        .await,
        ErrorCode::NotEmpty
    );
    assert_eq!(
        err(
            &mut raw,
            Request::Delete(DeleteRequest {
                path: "/p".into(),
                version: 9
            })
        )
        .await,
        ErrorCode::BadVersion
    );
    assert_eq!(
        err(
            &mut raw,
            Request::Delete(DeleteRequest {
                path: "/nope".into(),
                version: -1
            })
        )
        .await,
        ErrorCode::NoNode
    );
    // exists with NUL, reads of malformed paths
    assert_eq!(
        err(
            &mut raw,
            Request::Exists(rzk_wire::ExistsRequest {
                path: "/a\0b".into(),
                watch: false
            })
        )
        .await,
        ErrorCode::BadArguments
    );
    assert_eq!(
        err(
            &mut raw,
            Request::GetData(rzk_wire::GetDataRequest {
                path: "//x".into(),
                watch: false
            })
        )
        .await,
        ErrorCode::NoNode
    );
    // TTL: op 21 with a non-TTL mode, a bad TTL
    let ttl = |flags, ttl_ms| {
        Request::CreateTtl(CreateTtlRequest {
            path: "/t".into(),
            data: None,
            acl: Acl::open_unsafe(),
            flags,
            ttl_ms,
        })
    };
    assert_eq!(err(&mut raw, ttl(0, 100)).await, ErrorCode::BadArguments);
    assert_eq!(err(&mut raw, ttl(5, 0)).await, ErrorCode::BadArguments);
    assert!(raw.call(ttl(5, 100_000)).await.result.is_ok());
    server.stop().await.unwrap();
}

#[tokio::test]
async fn ttl_is_unimplemented_unless_extended_types_are_enabled() {
    let dir = tempfile::tempdir().unwrap();
    let server =
        TestServer::start(dir.path(), &[("zookeeper.extendedTypesEnabled", "false")]).await;
    let (mut raw, _) = Raw::connect(server.addr, 4000).await;
    let req = Request::CreateTtl(CreateTtlRequest {
        path: "/t".into(),
        data: None,
        acl: Acl::open_unsafe(),
        flags: 5,
        ttl_ms: 1000,
    });
    assert_eq!(err(&mut raw, req).await, ErrorCode::Unimplemented);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn failed_writes_consume_a_zxid_and_reads_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), &[]).await;
    let (mut raw, _) = Raw::connect(server.addr, 4000).await;
    let a = raw.call(create_req("/z", b"", 0)).await.zxid.as_u64();
    let b = raw.call(create_req("/z", b"", 0)).await;
    assert_eq!(b.result, Err(ErrorCode::NodeExists));
    assert_eq!(b.zxid.as_u64(), a + 1);
    let c = raw
        .call(Request::Exists(rzk_wire::ExistsRequest {
            path: "/z".into(),
            watch: false,
        }))
        .await;
    assert_eq!(c.zxid.as_u64(), a + 1);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn multi_is_atomic_with_zookeepers_results() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), &[]).await;
    let (mut raw, _) = Raw::connect(server.addr, 4000).await;
    assert!(raw.call(create_req("/m1", b"a", 0)).await.result.is_ok());
    let mk = |p: &str| CreateRequest {
        path: p.into(),
        data: None,
        acl: Acl::open_unsafe(),
        flags: 0,
    };
    let ok = MultiRequest {
        ops: vec![
            MultiOp::Create(mk("/m2")),
            MultiOp::Create2(mk("/m2/x")),
            MultiOp::CreateContainer(CreateRequest {
                flags: 4,
                ..mk("/m3")
            }),
            MultiOp::SetData(SetDataRequest {
                path: "/m1".into(),
                data: Some(Bytes::from_static(b"b")),
                version: 0,
            }),
            MultiOp::Check(CheckVersionRequest {
                path: "/m1".into(),
                version: 1,
            }),
            MultiOp::Delete(DeleteRequest {
                path: "/m2/x".into(),
                version: -1,
            }),
        ],
    };
    let r = raw.call(Request::Multi(ok)).await;
    let Ok(Response::Multi(m)) = r.result else {
        panic!("{r:?}")
    };
    assert!(matches!(&m.results[0], MultiResult::Create(c) if &*c.path == "/m2"));
    assert!(
        matches!(&m.results[1], MultiResult::Create(c) if &*c.path == "/m2/x"),
        "create2 answers as type 1"
    );
    assert!(
        matches!(&m.results[2], MultiResult::Create2(c) if &*c.path == "/m3"),
        "containers answer as type 15"
    );
    let MultiResult::SetData(stat) = &m.results[3] else {
        panic!()
    };
    assert_eq!(
        (stat.version, stat.mzxid),
        (1, r.zxid),
        "one zxid for the whole multi"
    );
    assert_eq!(m.results[4], MultiResult::Check);
    assert_eq!(m.results[5], MultiResult::Delete);
    let bad = MultiRequest {
        ops: vec![
            MultiOp::Create(mk("/m4")),
            MultiOp::Check(CheckVersionRequest {
                path: "/m1".into(),
                version: 99,
            }),
            MultiOp::SetData(SetDataRequest {
                path: "/m1".into(),
                data: None,
                version: -1,
            }),
        ],
    };
    let r = raw.call(Request::Multi(bad)).await;
    let Ok(Response::Multi(m)) = r.result else {
        panic!("{r:?}")
    };
    assert_eq!(
        m.results,
        vec![
            MultiResult::Error(ErrorCode::Ok),
            MultiResult::Error(ErrorCode::BadVersion),
            MultiResult::Error(ErrorCode::RuntimeInconsistency)
        ]
    );
    assert_eq!(
        err(
            &mut raw,
            Request::GetData(rzk_wire::GetDataRequest {
                path: "/m4".into(),
                watch: false
            })
        )
        .await,
        ErrorCode::NoNode
    );
    // Sequence numbers count up inside a multi.
    let seq = MultiRequest {
        ops: vec![
            MultiOp::Create(CreateRequest {
                flags: 2,
                ..mk("/m2/s")
            }),
            MultiOp::Create(CreateRequest {
                flags: 2,
                ..mk("/m2/s")
            }),
        ],
    };
    let r = raw.call(Request::Multi(seq)).await;
    let Ok(Response::Multi(m)) = r.result else {
        panic!()
    };
    assert!(
        matches!(&m.results[1], MultiResult::Create(c) if &*c.path == "/m2/s0000000002"),
        "{m:?}"
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn acl_checks_and_getacl_masking() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(
        dir.path(),
        &[(
            "superDigest",
            &rzk_server::acl::digest_identity(b"super:admin"),
        )],
    )
    .await;
    let (mut owner, _) = Raw::connect(server.addr, 4000).await;
    let auth = |s: &str| {
        Request::Auth(rzk_wire::AuthPacket {
            auth_type: 0,
            scheme: "digest".into(),
            auth: Bytes::copy_from_slice(s.as_bytes()),
        })
    };
    owner.send(auth("alice:secret")).await;
    assert!(owner.reply(OpCode::Auth).await.result.is_ok());
    // auth ACL expands to the digest identity.
    let r = owner
        .call(create_acl("/locked", Acl::creator_all(), 0))
        .await;
    assert!(r.result.is_ok(), "{r:?}");
    let r = owner
        .call(Request::GetAcl(rzk_wire::GetAclRequest {
            path: "/locked".into(),
        }))
        .await;
    let Ok(Response::GetAcl(a)) = r.result else {
        panic!()
    };
    assert_eq!(&*a.acl[0].id.id, "alice:aYXlLOpEooaV1cRAvUL1fp9Qt7E=");
    let (mut other, _) = Raw::connect(server.addr, 4000).await;
    assert_eq!(
        err(&mut other, create_acl("/x", Acl::creator_all(), 0)).await,
        ErrorCode::InvalidAcl
    );
    assert_eq!(
        err(
            &mut other,
            Request::GetData(rzk_wire::GetDataRequest {
                path: "/locked".into(),
                watch: false
            })
        )
        .await,
        ErrorCode::NoAuth
    );
    assert_eq!(
        err(
            &mut other,
            Request::SetData(SetDataRequest {
                path: "/locked".into(),
                data: None,
                version: 7
            })
        )
        .await,
        ErrorCode::NoAuth,
        "ACL before version"
    );
    assert_eq!(
        err(&mut other, create_req("/locked/c", b"", 0)).await,
        ErrorCode::NoAuth
    );
    assert!(
        other
            .call(Request::Exists(rzk_wire::ExistsRequest {
                path: "/locked".into(),
                watch: false
            }))
            .await
            .result
            .is_ok(),
        "exists has no ACL check"
    );
    // READ-only ACL for others: getACL masks digests without ADMIN.
    let acl = vec![
        digest_acl(31, "alice:secret"),
        Acl {
            perms: Perms::READ,
            id: Id::anyone(),
        },
    ];
    assert!(owner
        .call(Request::SetAcl(SetAclRequest {
            path: "/locked".into(),
            acl,
            version: 0
        }))
        .await
        .result
        .is_ok());
    assert_eq!(
        err(
            &mut owner,
            Request::SetAcl(SetAclRequest {
                path: "/locked".into(),
                acl: Acl::open_unsafe(),
                version: 0
            })
        )
        .await,
        ErrorCode::BadVersion
    );
    let r = other
        .call(Request::GetAcl(rzk_wire::GetAclRequest {
            path: "/locked".into(),
        }))
        .await;
    let Ok(Response::GetAcl(a)) = r.result else {
        panic!("{r:?}")
    };
    assert_eq!(&*a.acl[0].id.id, "alice:x");
    assert_eq!(a.stat.aversion, 1);
    // The super digest passes everything.
    other.send(auth("super:admin")).await;
    assert!(other.reply(OpCode::Auth).await.result.is_ok());
    assert!(other
        .call(Request::Delete(DeleteRequest {
            path: "/locked".into(),
            version: -1
        }))
        .await
        .result
        .is_ok());
    // whoAmI lists the identities.
    let r = owner.call(Request::WhoAmI).await;
    let Ok(Response::WhoAmI(w)) = r.result else {
        panic!()
    };
    let ids: Vec<(String, String)> = w
        .client_info
        .iter()
        .map(|c| (c.auth_scheme.to_string(), c.user.to_string()))
        .collect();
    assert!(ids.contains(&("digest".into(), "alice".into())), "{ids:?}");
    assert!(ids.contains(&("ip".into(), "127.0.0.1".into())), "{ids:?}");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn ephemerals_children_counts_and_config_node() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), &[]).await;
    let (mut raw, _) = Raw::connect(server.addr, 4000).await;
    for p in ["/e1", "/e2-", "/f"] {
        assert!(raw
            .call(create_req(p, b"", if p == "/f" { 0 } else { 1 }))
            .await
            .result
            .is_ok());
    }
    assert!(raw.call(create_req("/f/g", b"", 0)).await.result.is_ok());
    let r = raw
        .call(Request::GetEphemerals(rzk_wire::GetEphemeralsRequest {
            prefix_path: "/e".into(),
        }))
        .await;
    let Ok(Response::GetEphemerals(e)) = r.result else {
        panic!()
    };
    let mut got: Vec<String> = e.ephemerals.iter().map(|s| s.to_string()).collect();
    got.sort();
    assert_eq!(got, vec!["/e1", "/e2-"]);
    let r = raw
        .call(Request::GetAllChildrenNumber(
            rzk_wire::GetAllChildrenNumberRequest { path: "/".into() },
        ))
        .await;
    let Ok(Response::GetAllChildrenNumber(n)) = r.result else {
        panic!()
    };
    assert_eq!(
        n.total_number, 7,
        "3 under /zookeeper-inclusive + e1, e2-, f, f/g"
    );
    let r = raw
        .call(Request::GetData(rzk_wire::GetDataRequest {
            path: "/zookeeper/config".into(),
            watch: true,
        }))
        .await;
    let Ok(Response::GetData(d)) = r.result else {
        panic!()
    };
    assert_eq!(d.stat.data_length, 0);
    assert_eq!(
        err(
            &mut raw,
            Request::SetData(SetDataRequest {
                path: "/zookeeper/config".into(),
                data: None,
                version: -1
            })
        )
        .await,
        ErrorCode::NoAuth
    );
    assert_eq!(
        err(
            &mut raw,
            Request::Reconfig(rzk_wire::ReconfigRequest {
                joining_servers: None,
                leaving_servers: None,
                new_members: None,
                cur_config_id: -1
            })
        )
        .await,
        ErrorCode::ReconfigDisabled
    );
    // empty data and null data stay apart
    assert!(raw
        .call(Request::Create(CreateRequest {
            path: "/null".into(),
            data: None,
            acl: Acl::open_unsafe(),
            flags: 0
        }))
        .await
        .result
        .is_ok());
    let r = raw
        .call(Request::GetData(rzk_wire::GetDataRequest {
            path: "/null".into(),
            watch: false,
        }))
        .await;
    let Ok(Response::GetData(d)) = r.result else {
        panic!()
    };
    assert_eq!(d.data, None);
    let r = raw
        .call(Request::GetData(rzk_wire::GetDataRequest {
            path: "/f".into(),
            watch: false,
        }))
        .await;
    let Ok(Response::GetData(d)) = r.result else {
        panic!()
    };
    assert_eq!(d.data, Some(Bytes::new()));
    server.stop().await.unwrap();
}

#[tokio::test]
async fn containers_and_ttl_nodes_are_reaped() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), &[]).await;
    let (mut raw, _) = Raw::connect(server.addr, 4000).await;
    let container = Request::CreateContainer(CreateRequest {
        path: "/c".into(),
        data: None,
        acl: Acl::open_unsafe(),
        flags: 4,
    });
    assert!(raw.call(container).await.result.is_ok());
    let ttl = Request::CreateTtl(CreateTtlRequest {
        path: "/t".into(),
        data: None,
        acl: Acl::open_unsafe(),
        flags: 5,
        ttl_ms: 300,
    });
    assert!(raw.call(ttl).await.result.is_ok());
    let never_used_container_survives = Request::CreateContainer(CreateRequest {
        path: "/c2".into(),
        data: None,
        acl: Acl::open_unsafe(),
        flags: 4,
    });
    assert!(raw.call(never_used_container_survives).await.result.is_ok());
    assert!(raw
        .call(create_req("/c/child", b"", 0))
        .await
        .result
        .is_ok());
    let c = client(&server).await;
    eventually(
        Duration::from_secs(10),
        "the TTL node is deleted",
        || async { c.check_stat("/t").await.unwrap().is_none() },
    )
    .await;
    // A sentinel: a container used and emptied after /c got its child. Once the
    // reaper has collected it, a reaper pass has run that saw /c with its child.
    assert!(raw.call(container_req("/s")).await.result.is_ok());
    assert!(raw.call(create_req("/s/x", b"", 0)).await.result.is_ok());
    c.delete("/s/x", None).await.unwrap();
    eventually(
        Duration::from_secs(10),
        "the emptied sentinel container is deleted",
        || async { c.check_stat("/s").await.unwrap().is_none() },
    )
    .await;
    assert!(
        c.check_stat("/c").await.unwrap().is_some(),
        "a container with a child stays"
    );
    c.delete("/c/child", None).await.unwrap();
    eventually(
        Duration::from_secs(10),
        "the emptied container is deleted",
        || async { c.check_stat("/c").await.unwrap().is_none() },
    )
    .await;
    assert!(
        c.check_stat("/c2").await.unwrap().is_some(),
        "a never-used container stays"
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn multi_read_and_sync() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), &[]).await;
    let (mut raw, _) = Raw::connect(server.addr, 4000).await;
    assert!(raw.call(create_req("/r", b"d", 0)).await.result.is_ok());
    assert!(raw.call(create_req("/r/k", b"", 0)).await.result.is_ok());
    let read = rzk_wire::MultiReadRequest {
        ops: vec![
            rzk_wire::MultiReadOp::GetData(rzk_wire::GetDataRequest {
                path: "/r".into(),
                watch: false,
            }),
            rzk_wire::MultiReadOp::GetChildren(rzk_wire::GetChildrenRequest {
                path: "/nope".into(),
                watch: false,
            }),
            rzk_wire::MultiReadOp::GetChildren(rzk_wire::GetChildrenRequest {
                path: "/r".into(),
                watch: false,
            }),
        ],
    };
    let before = raw.call(Request::Ping).await.zxid;
    let r = raw.call(Request::MultiRead(read)).await;
    assert_eq!(r.zxid, before, "multiRead consumes no zxid");
    let Ok(Response::Multi(m)) = r.result else {
        panic!("{r:?}")
    };
    assert!(
        matches!(&m.results[0], MultiResult::GetData(d) if d.data.as_deref() == Some(&b"d"[..]))
    );
    assert_eq!(m.results[1], MultiResult::Error(ErrorCode::NoNode));
    assert!(matches!(&m.results[2], MultiResult::GetChildren(c) if c.children.len() == 1));
    // sync: answered in order, echoing the path, after the writes before it.
    raw.send(create_req("/r/s", b"", 0)).await;
    raw.send(Request::Sync(rzk_wire::SyncRequest {
        path: "/whatever".into(),
    }))
    .await;
    let c = raw.reply(OpCode::Create).await;
    let s = raw.reply(OpCode::Sync).await;
    let Ok(Response::Sync(sync)) = s.result else {
        panic!("{s:?}")
    };
    assert_eq!(&*sync.path, "/whatever");
    assert!(s.zxid >= c.zxid);
    server.stop().await.unwrap();
}

fn container_req(path: &str) -> Request {
    Request::CreateContainer(CreateRequest {
        path: path.into(),
        data: None,
        acl: Acl::open_unsafe(),
        flags: 4,
    })
}
