//! The ZooKeeper layout under the configured root, and parsing of election node names.
//!
//! ```text
//! <root>/election/n_0000000042   ephemeral sequential, data = node name; lowest leads
//! <root>/leader                  ephemeral, data = leader's node name; czxid = epoch
//! <root>/members/<node name>     ephemeral, data = node name
//! <root>/workers/<id>            ephemeral, data = node name; id = snowflake worker id
//! ```

use zookeeper_client::CreateSequence;

/// The prefix of election node names; ZooKeeper appends a ten-digit sequence.
const ELECTION_PREFIX: &str = "n_";

/// Absolute paths used by one node.
#[derive(Clone, Debug)]
pub(super) struct Paths {
    /// Parent of the election nodes.
    pub(super) election_dir: String,
    /// The path passed to a sequential create.
    pub(super) election_prefix: String,
    /// The leader announcement node; its czxid is the epoch.
    pub(super) leader: String,
    /// Parent of the member registrations.
    pub(super) members_dir: String,
    /// This node's member registration.
    pub(super) member: String,
    /// Parent of the worker id claims.
    pub(super) workers_dir: String,
}

impl Paths {
    /// Lays out the paths for `node_name` under `root` (absolute, no trailing slash).
    pub(super) fn new(root: &str, node_name: &str) -> Paths {
        let election_dir = format!("{root}/election");
        let members_dir = format!("{root}/members");
        Paths {
            election_prefix: format!("{election_dir}/{ELECTION_PREFIX}"),
            election_dir,
            leader: format!("{root}/leader"),
            member: format!("{members_dir}/{node_name}"),
            members_dir,
            workers_dir: format!("{root}/workers"),
        }
    }

    /// Returns the path of election node `child` (a name listed under the election dir).
    pub(super) fn election_node(&self, child: &str) -> String {
        format!("{}/{child}", self.election_dir)
    }

    /// Returns the path of the claim on worker id `worker_id`.
    pub(super) fn worker(&self, worker_id: u16) -> String {
        format!("{}/{worker_id}", self.workers_dir)
    }
}

/// One election node, by its child name and sequence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Candidate {
    /// The child name, e.g. `n_0000000042`.
    pub(super) name: String,
    /// The sequence ZooKeeper appended.
    pub(super) sequence: i64,
}

impl Candidate {
    /// Parses an election child name; other names are not candidates.
    pub(super) fn parse(child: &str) -> Option<Candidate> {
        let digits = child.strip_prefix(ELECTION_PREFIX)?;
        if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
            return None;
        }
        let sequence = digits.parse().ok()?;
        Some(Candidate { name: child.to_owned(), sequence })
    }

    /// Returns the candidate ZooKeeper created with `sequence`.
    pub(super) fn created(sequence: CreateSequence) -> Candidate {
        Candidate { name: format!("{ELECTION_PREFIX}{sequence}"), sequence: sequence.into_i64() }
    }
}

/// Returns the candidates among `children`, lowest sequence (the leader) first.
pub(super) fn rank_candidates(children: &[String]) -> Vec<Candidate> {
    let mut candidates: Vec<Candidate> = children.iter().filter_map(|child| Candidate::parse(child)).collect();
    candidates.sort_by_key(|candidate| candidate.sequence);
    candidates
}

/// Returns the worker id to try first for `node_name` (FNV-1a, stable across builds).
pub(super) fn hashed_worker_id(node_name: &str) -> u16 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in node_name.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    let worker_id = hash % u64::from(crate::WORKER_ID_COUNT);
    u16::try_from(worker_id).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_rank_by_sequence_and_ignore_strangers() {
        let children: Vec<String> = ["n_0000000012", "lock", "n_0000000003", "n_", "n_12x", "n_2147483648"]
            .into_iter()
            .map(String::from)
            .collect();
        let ranked: Vec<i64> = rank_candidates(&children).iter().map(|c| c.sequence).collect();
        assert_eq!(ranked, vec![3, 12, 2_147_483_648]);
    }

    #[test]
    fn parsed_names_keep_their_sequence() {
        let candidate = Candidate::parse("n_0000000042");
        assert_eq!(candidate.map(|c| c.sequence), Some(42));
    }

    #[test]
    fn layout_hangs_under_the_root() {
        let paths = Paths::new("/delayq", "node-a");
        assert_eq!(paths.election_prefix, "/delayq/election/n_");
        assert_eq!(paths.member, "/delayq/members/node-a");
        assert_eq!(paths.worker(7), "/delayq/workers/7");
        assert_eq!(paths.election_node("n_0000000001"), "/delayq/election/n_0000000001");
    }

    #[test]
    fn hashed_worker_ids_are_stable_and_in_range() {
        assert_eq!(hashed_worker_id("node-a"), hashed_worker_id("node-a"));
        assert!(hashed_worker_id("node-b") < crate::WORKER_ID_COUNT);
    }
}
