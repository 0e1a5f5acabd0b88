//! The web console's logins, kept in the store: every kernel on the database (every replica
//! behind a load balancer) knows every login, a logout on one ends it on all, and a revoked or
//! expired API key ends its logins at once. The store holds only the SHA-256 of a session
//! token, whom it acts as, and when it ends; checking one is a single indexed read.

use super::keys::active_principal;
use super::{Kernel, KernelResult};
use crate::protocol::Principal;
use crate::store::{ConsoleSession, StoreExt};
use crate::time::Timestamp;
use std::time::Duration;

impl Kernel {
    /// Records a console login that lasts `ttl` from now (its `started_at` and `ends_at` are
    /// set here). Sessions that have ended are swept first, and the principal's oldest
    /// sessions go so that it keeps at most `max_per_principal` (this one included).
    pub async fn start_console_session(
        &self,
        mut session: ConsoleSession,
        ttl: Duration,
        max_per_principal: usize,
    ) -> KernelResult<()> {
        let now = self.now();
        session.started_at = Timestamp::from(now);
        session.ends_at = Timestamp::from(now + ttl);
        let keep = max_per_principal.saturating_sub(1);
        self.inner
            .store
            .write(move |tx| {
                let sessions = tx.console_sessions();
                sessions.delete_expired(&session.started_at)?;
                sessions.keep_newest(&session.key_id, keep)?;
                sessions.insert(&session)
            })
            .await?;
        Ok(())
    }

    /// The live console session whose token hashes to `id_hash` and whom it acts as (the
    /// admin, or its API key's principal): `None` when it is unknown, has ended, or its key is
    /// revoked, expired or gone.
    pub async fn console_session(
        &self,
        id_hash: &str,
    ) -> KernelResult<Option<(ConsoleSession, Principal)>> {
        let id_hash = id_hash.to_owned();
        let found = self
            .inner
            .store
            .read(move |tx| tx.console_sessions().get(&id_hash))
            .await?;
        let now = self.now_ts();
        let Some((session, key)) = found.filter(|(s, _)| s.ends_at > now) else {
            return Ok(None);
        };
        let principal = if session.key_id.is_empty() {
            Some(Principal::admin())
        } else {
            key.and_then(|k| active_principal(&k, &now))
        };
        Ok(principal.map(|p| (session, p)))
    }

    /// Ends the console session whose token hashes to `id_hash` (nothing if there is none).
    pub async fn end_console_session(&self, id_hash: &str) -> KernelResult<()> {
        let id_hash = id_hash.to_owned();
        self.inner
            .store
            .write(move |tx| tx.console_sessions().delete(&id_hash))
            .await?;
        Ok(())
    }
}
