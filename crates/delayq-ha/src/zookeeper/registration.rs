//! This node's nodes in ZooKeeper: the layout, its worker id claim, its member registration,
//! its election node and the leader announcement.
//!
//! Every step is idempotent within a session: a create cut short by a connection loss is
//! found again by its ephemeral owner. Nodes carrying this node's name but owned by another
//! session were left by an earlier session of this node (a restart, or a session this process
//! gave up on) and are taken over, so a restart does not wait for the old session to expire.

use tracing::{debug, info, warn};
use zookeeper_client::{Acls, CheckWriteError, Client, CreateMode, CreateOptions, Error as ZkError, Stat};

use super::guard::{Interrupt, StateGuard};
use super::paths::{rank_candidates, Candidate, Paths};
use crate::WORKER_ID_COUNT;

const PERSISTENT: CreateOptions<'static> = CreateMode::Persistent.with_acls(Acls::anyone_all());
const EPHEMERAL: CreateOptions<'static> = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
const EPHEMERAL_SEQUENTIAL: CreateOptions<'static> = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());

/// Returns the epoch a leader node stands for: its creation zxid, which only grows.
pub(super) fn epoch_of(stat: &Stat) -> u64 {
    u64::try_from(stat.czxid).unwrap_or_default()
}

/// Creates and removes this node's nodes with one session's client.
pub(super) struct Registrar<'a> {
    /// The session's client.
    pub(super) client: &'a Client,
    /// The layout.
    pub(super) paths: &'a Paths,
    /// This node's name, the data of all its nodes.
    pub(super) node_name: &'a str,
}

impl Registrar<'_> {
    /// Returns the id of the session, the ephemeral owner of this node's nodes.
    pub(super) fn session_id(&self) -> i64 {
        self.client.session_id().0
    }

    /// Creates the persistent directories (and the root) if missing.
    pub(super) async fn create_layout(&self, guard: &mut StateGuard<'_>) -> Result<(), Interrupt> {
        for dir in [&self.paths.election_dir, &self.paths.members_dir, &self.paths.workers_dir] {
            guard.call(self.client.mkdir(dir, &PERSISTENT)).await?;
        }
        Ok(())
    }

    /// Claims the first free worker id from `preferred` on, so no two live nodes share one.
    pub(super) async fn claim_worker_id(&self, guard: &mut StateGuard<'_>, preferred: u16) -> Result<u16, Interrupt> {
        for offset in 0..WORKER_ID_COUNT {
            let worker_id = (preferred % WORKER_ID_COUNT + offset) % WORKER_ID_COUNT;
            if self.claim_ephemeral(guard, &self.paths.worker(worker_id)).await? {
                return Ok(worker_id);
            }
        }
        Err(Interrupt::Stuck("all snowflake worker ids are held by live nodes"))
    }

    /// Registers this node under the members directory.
    pub(super) async fn register_member(&self, guard: &mut StateGuard<'_>) -> Result<(), Interrupt> {
        if self.claim_ephemeral(guard, &self.paths.member).await? {
            return Ok(());
        }
        Err(Interrupt::Stuck("another live session registered this node name"))
    }

    /// Joins the election: adopts this session's election node if one exists (a create cut
    /// short), removes those of earlier sessions of this node, else creates one.
    pub(super) async fn enter_election(&self, guard: &mut StateGuard<'_>) -> Result<Candidate, Interrupt> {
        let children = guard.call(self.client.list_children(&self.paths.election_dir)).await?;
        for candidate in rank_candidates(&children) {
            let path = self.paths.election_node(&candidate.name);
            let Some((data, stat)) = self.read(guard, &path).await? else {
                continue;
            };
            if data != self.node_name.as_bytes() {
                continue;
            }
            if stat.ephemeral_owner == self.session_id() {
                return Ok(candidate);
            }
            warn!(path = %path, "removing an election node left by an earlier session of this node");
            self.delete_quietly(guard, &path, stat.version).await?;
        }
        let create = self.client.create(&self.paths.election_prefix, self.node_name.as_bytes(), &EPHEMERAL_SEQUENTIAL);
        let (_, sequence) = guard.call(create).await?;
        let candidate = Candidate::created(sequence);
        debug!(candidate = %candidate.name, "entered the election");
        Ok(candidate)
    }

    /// Announces this node as leader, `own` being the lowest election node, and returns the
    /// epoch; `None` when another session holds the announcement or `own` is gone.
    ///
    /// An announcement of this session is kept while `holds_term` accepts its epoch; otherwise
    /// the term it stood for was fenced and a new one (with a new epoch) is started.
    pub(super) async fn claim_leader(
        &self,
        guard: &mut StateGuard<'_>,
        own: &Candidate,
        holds_term: impl Fn(u64) -> bool,
    ) -> Result<Option<u64>, Interrupt> {
        if let Some(stat) = guard.call(self.client.check_stat(&self.paths.leader)).await? {
            if stat.ephemeral_owner == self.session_id() && holds_term(epoch_of(&stat)) {
                return Ok(Some(epoch_of(&stat)));
            }
            if stat.ephemeral_owner == self.session_id() {
                self.delete_quietly(guard, &self.paths.leader, stat.version).await?;
            } else if !self.take_over_leftover(guard, &self.paths.leader).await? {
                return Ok(None);
            }
        }
        // The create applies only while our election node exists, in one transaction.
        let own_path = self.paths.election_node(&own.name);
        let mut writer = self.client.new_check_writer(&own_path, None).map_err(|err| guard.interrupt_for(err))?;
        writer
            .add_create(&self.paths.leader, self.node_name.as_bytes(), &EPHEMERAL)
            .map_err(|err| guard.interrupt_for(err))?;
        match guard.call_raw(writer.commit()).await? {
            Ok(_) => {}
            Err(CheckWriteError::CheckFailed { .. }) => return Ok(None),
            Err(CheckWriteError::OperationFailed { source: ZkError::NodeExists, .. }) => return Ok(None),
            Err(CheckWriteError::OperationFailed { source, .. } | CheckWriteError::RequestFailed { source }) => {
                return Err(guard.interrupt_for(source));
            }
        }
        let stat = guard.call(self.client.check_stat(&self.paths.leader)).await?;
        let epoch = stat.filter(|stat| stat.ephemeral_owner == self.session_id()).map(|stat| epoch_of(&stat));
        if let Some(epoch) = epoch {
            info!(epoch, "elected leader");
        }
        Ok(epoch)
    }

    /// Deletes this session's nodes, leader announcement first; best effort, no fencing.
    pub(super) async fn leave(&self, election: Option<&Candidate>, worker_id: Option<u16>) {
        let mut paths = vec![self.paths.leader.clone()];
        paths.extend(election.map(|candidate| self.paths.election_node(&candidate.name)));
        paths.push(self.paths.member.clone());
        paths.extend(worker_id.map(|worker_id| self.paths.worker(worker_id)));
        for path in paths {
            let stat = match self.client.check_stat(&path).await {
                Ok(Some(stat)) if stat.ephemeral_owner == self.session_id() => stat,
                Ok(_) => continue,
                Err(err) => {
                    warn!(path = %path, cause = %err, "cannot remove zookeeper node, it expires with the session");
                    return;
                }
            };
            if let Err(err) = self.client.delete(&path, Some(stat.version)).await {
                debug!(path = %path, cause = %err, "zookeeper node not removed");
            }
        }
    }

    /// Creates the ephemeral `path` with this node's name; returns whether this session
    /// holds it afterwards.
    async fn claim_ephemeral(&self, guard: &mut StateGuard<'_>, path: &str) -> Result<bool, Interrupt> {
        for _attempt in 0..3 {
            match guard.call(self.client.create(path, self.node_name.as_bytes(), &EPHEMERAL)).await {
                Ok(_) => return Ok(true),
                Err(Interrupt::Refused(ZkError::NodeExists)) => {}
                Err(other) => return Err(other),
            }
            let Some((_, stat)) = self.read(guard, path).await? else {
                continue;
            };
            if stat.ephemeral_owner == self.session_id() {
                return Ok(true);
            }
            if !self.take_over_leftover(guard, path).await? {
                return Ok(false);
            }
        }
        Ok(false)
    }

    /// Deletes `path` if an earlier session of this node left it; returns whether it is gone.
    async fn take_over_leftover(&self, guard: &mut StateGuard<'_>, path: &str) -> Result<bool, Interrupt> {
        let Some((data, stat)) = self.read(guard, path).await? else {
            return Ok(true);
        };
        if data != self.node_name.as_bytes() || stat.ephemeral_owner == self.session_id() {
            return Ok(false);
        }
        warn!(path = %path, "taking over a node left by an earlier session of this node");
        self.delete_quietly(guard, path, stat.version).await?;
        Ok(true)
    }

    /// Reads `path`; `None` if it does not exist.
    async fn read(&self, guard: &mut StateGuard<'_>, path: &str) -> Result<Option<(Vec<u8>, Stat)>, Interrupt> {
        match guard.call(self.client.get_data(path)).await {
            Ok(found) => Ok(Some(found)),
            Err(Interrupt::Refused(ZkError::NoNode)) => Ok(None),
            Err(other) => Err(other),
        }
    }

    /// Deletes `path` at `version`; a node already gone or changed is left to the next round.
    async fn delete_quietly(&self, guard: &mut StateGuard<'_>, path: &str, version: i32) -> Result<(), Interrupt> {
        match guard.call(self.client.delete(path, Some(version))).await {
            Ok(()) | Err(Interrupt::Refused(ZkError::NoNode | ZkError::BadVersion)) => Ok(()),
            Err(other) => Err(other),
        }
    }
}
