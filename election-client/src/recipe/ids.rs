//! The ids and path helpers every recipe machine shares: [`OpId`], which tags each
//! call, watch and timer a machine asks for, and the znode path helpers.
//!
//! They sit below both [`super::engine`] and the machines built on it, so no machine
//! borrows them from another.

/// Identifies one call, watch or timer issued by a machine. Strictly increasing within
/// one machine, so an answer tagged with an id the machine no longer waits for is known
/// to be stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub u64);

/// `parent/child`, without doubling the root's slash.
pub fn join_path(parent: &str, child: &str) -> String {
    if parent == "/" {
        format!("/{child}")
    } else {
        format!("{parent}/{child}")
    }
}

/// The last component of a path.
pub fn name_of(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_path_does_not_double_the_root_slash() {
        assert_eq!(join_path("/", "a"), "/a");
        assert_eq!(join_path("/a/b", "c"), "/a/b/c");
    }

    #[test]
    fn name_of_is_the_last_component() {
        assert_eq!(name_of("/a/b/c-0000000001"), "c-0000000001");
        assert_eq!(name_of("/a"), "a");
        assert_eq!(name_of("plain"), "plain");
    }
}
