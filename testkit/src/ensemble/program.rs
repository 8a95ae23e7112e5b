//! Which server a member runs, and its command line.
//!
//! rzk reads everything from its zoo.cfg. Apache ZooKeeper (the Debian
//! package's jars, the reference the CI stages compare against) takes a few
//! settings only as Java system properties, so for it those zoo.cfg keys are
//! also passed as `-D` flags ([`ZOOKEEPER_PROPERTIES`]); its log goes to the
//! member's log through log4j's console appender.

use std::path::{Path, PathBuf};

/// The server program of every member of an ensemble.
#[derive(Clone, Debug)]
pub enum Program {
    /// `rzk <zoo.cfg>`.
    Rzk {
        /// The binary.
        bin: PathBuf,
        /// Environment variables set for the members.
        env: Vec<(String, String)>,
        /// Environment variables removed for the members (`RUST_LOG`, so a
        /// test's own filter does not reach them).
        env_remove: Vec<String>,
    },
    /// Apache ZooKeeper: `java ... QuorumPeerMain <zoo.cfg>`
    /// (`ZooKeeperServerMain` for a standalone server).
    ZooKeeper {
        /// `java`, from `PATH` unless given.
        java: PathBuf,
        /// Where `zookeeper.jar` (and the log binding's jars) are.
        jars: PathBuf,
        /// Flags before the ones the launcher adds (`-Xmx512m`, ...).
        jvm_args: Vec<String>,
    },
}

/// zoo.cfg keys that Apache ZooKeeper reads only as system properties, and
/// the property each becomes (rzk reads them from the file).
pub const ZOOKEEPER_PROPERTIES: &[(&str, &str)] = &[
    (
        "zookeeper.extendedTypesEnabled",
        "zookeeper.extendedTypesEnabled",
    ),
    ("jute.maxbuffer", "jute.maxbuffer"),
    (
        "superDigest",
        "zookeeper.DigestAuthenticationProvider.superDigest",
    ),
    (
        "znode.container.checkIntervalMs",
        "znode.container.checkIntervalMs",
    ),
];

/// ZooKeeper's log configuration: everything at INFO to the console, which
/// goes to the member's log file.
pub const LOG4J_PROPERTIES: &str = "\
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n
";

/// A member's command: program, arguments and environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// The program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables set.
    pub env: Vec<(String, String)>,
    /// Variables removed.
    pub env_remove: Vec<String>,
}

impl Program {
    /// rzk from `bin`.
    pub fn rzk(bin: impl Into<PathBuf>) -> Program {
        Program::Rzk {
            bin: bin.into(),
            env: Vec::new(),
            env_remove: Vec::new(),
        }
    }

    /// Apache ZooKeeper from Debian's jars in /usr/share/java, `java` from `PATH`.
    pub fn zookeeper() -> Program {
        Program::ZooKeeper {
            java: PathBuf::from("java"),
            jars: PathBuf::from("/usr/share/java"),
            jvm_args: Vec::new(),
        }
    }

    /// Sets an environment variable for rzk members (no effect on ZooKeeper).
    pub fn env(mut self, key: &str, value: &str) -> Program {
        if let Program::Rzk { env, .. } = &mut self {
            env.push((key.to_owned(), value.to_owned()));
        }
        self
    }

    /// Removes an environment variable for rzk members.
    pub fn env_remove(mut self, key: &str) -> Program {
        if let Program::Rzk { env_remove, .. } = &mut self {
            env_remove.push(key.to_owned());
        }
        self
    }

    /// Adds a JVM flag for ZooKeeper members (no effect on rzk).
    pub fn jvm_arg(mut self, arg: &str) -> Program {
        if let Program::ZooKeeper { jvm_args, .. } = &mut self {
            jvm_args.push(arg.to_owned());
        }
        self
    }

    /// `rzk` or `Apache ZooKeeper`, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Program::Rzk { .. } => "rzk",
            Program::ZooKeeper { .. } => "Apache ZooKeeper",
        }
    }

    /// Whether this is Apache ZooKeeper.
    pub fn is_zookeeper(&self) -> bool {
        matches!(self, Program::ZooKeeper { .. })
    }

    /// The command of a member whose zoo.cfg is `cfg` (pairs `settings`) in
    /// `dir`; writes ZooKeeper's log configuration into `dir/conf`.
    pub(crate) fn launch(
        &self,
        dir: &Path,
        cfg: &Path,
        settings: &[(String, String)],
        standalone: bool,
    ) -> std::io::Result<Launch> {
        match self {
            Program::Rzk {
                bin,
                env,
                env_remove,
            } => Ok(Launch {
                program: bin.clone(),
                args: vec![cfg.display().to_string()],
                env: env.clone(),
                env_remove: env_remove.clone(),
            }),
            Program::ZooKeeper {
                java,
                jars,
                jvm_args,
            } => {
                let conf = dir.join("conf");
                std::fs::create_dir_all(&conf)?;
                std::fs::write(conf.join("log4j.properties"), LOG4J_PROPERTIES)?;
                let main = if standalone {
                    "org.apache.zookeeper.server.ZooKeeperServerMain"
                } else {
                    "org.apache.zookeeper.server.quorum.QuorumPeerMain"
                };
                let mut args = jvm_args.clone();
                args.extend(zookeeper_properties(settings));
                args.push(format!(
                    "-Dlog4j.configuration=file:{}",
                    conf.join("log4j.properties").display()
                ));
                args.push("-cp".to_owned());
                args.push(classpath(&conf, jars));
                args.push(main.to_owned());
                args.push(cfg.display().to_string());
                Ok(Launch {
                    program: java.clone(),
                    args,
                    env: Vec::new(),
                    env_remove: Vec::new(),
                })
            }
        }
    }
}

/// The `-D` flags of a ZooKeeper member: the AdminServer as the zoo.cfg says
/// (off unless it says true), then the keys of [`ZOOKEEPER_PROPERTIES`].
fn zookeeper_properties(settings: &[(String, String)]) -> Vec<String> {
    let value = |key: &str| {
        settings
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let admin = value("admin.enableServer").unwrap_or("false");
    let mut out = vec![format!("-Dzookeeper.admin.enableServer={admin}")];
    for (key, property) in ZOOKEEPER_PROPERTIES {
        if let Some(v) = value(key) {
            out.push(format!("-D{property}={v}"));
        }
    }
    out
}

/// `conf:zookeeper.jar[:slf4j-log4j12.jar:log4j-1.2.jar]`: the jar's manifest
/// names its dependencies but no slf4j binding; these two (dependencies of
/// Debian's libzookeeper-java) give the server a log.
fn classpath(conf: &Path, jars: &Path) -> String {
    let mut cp = vec![
        conf.display().to_string(),
        jars.join("zookeeper.jar").display().to_string(),
    ];
    for extra in ["slf4j-log4j12.jar", "log4j-1.2.jar"] {
        let p = jars.join(extra);
        if p.exists() {
            cp.push(p.display().to_string());
        }
    }
    cp.join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn zookeeper_gets_its_system_properties_from_the_zoo_cfg() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("zoo.cfg");
        let settings = kv(&[
            ("tickTime", "2000"),
            ("admin.enableServer", "false"),
            ("superDigest", "super:abc"),
            ("znode.container.checkIntervalMs", "500"),
        ]);
        let l = Program::zookeeper()
            .jvm_arg("-Xmx512m")
            .launch(dir.path(), &cfg, &settings, false)
            .unwrap();
        assert_eq!(l.program, PathBuf::from("java"));
        assert_eq!(l.args[0], "-Xmx512m");
        assert_eq!(l.args[1], "-Dzookeeper.admin.enableServer=false");
        assert!(l
            .args
            .contains(&"-Dzookeeper.DigestAuthenticationProvider.superDigest=super:abc".into()));
        assert!(l
            .args
            .contains(&"-Dznode.container.checkIntervalMs=500".into()));
        assert!(!l.args.iter().any(|a| a.contains("tickTime")));
        let n = l.args.len();
        assert_eq!(
            l.args[n - 2],
            "org.apache.zookeeper.server.quorum.QuorumPeerMain"
        );
        assert_eq!(l.args[n - 1], cfg.display().to_string());
        assert!(dir.path().join("conf/log4j.properties").exists());
    }

    #[test]
    fn rzk_reads_its_zoo_cfg_and_nothing_else() {
        let l = Program::rzk("/bin/rzk")
            .env("RUST_LOG", "warn")
            .launch(Path::new("/d"), Path::new("/d/zoo.cfg"), &[], true)
            .unwrap();
        assert_eq!(l.args, vec!["/d/zoo.cfg".to_owned()]);
        assert_eq!(l.env, vec![("RUST_LOG".to_owned(), "warn".to_owned())]);
    }
}
