//! Listings: executions, an execution's events and steps, agents and pending approvals, each
//! read one bounded page at a time.
//!
//! Every listing has a default page size and a maximum, and continues from a cursor (the key
//! of the previous page's last row) in a stable order, so no request makes the kernel read or
//! answer an unbounded amount. The `…_page` methods answer one page with the cursor of the next;
//! the plain methods walk every page for in-process callers that want everything.

use super::agents::public;
use super::{Kernel, KernelError, KernelResult};
use crate::protocol::{Agent, Approval, Event, ExecutionList, Step};
use crate::store::{ExecutionQuery, Page, StoreExt};

/// Default page size of `GET /v0/executions`.
pub const LIST_DEFAULT_LIMIT: usize = 50;
/// Maximum page size of `GET /v0/executions`.
pub const LIST_MAX_LIMIT: usize = 200;
/// Default page size of `GET /v0/executions/{id}/events`.
pub const EVENTS_DEFAULT_LIMIT: usize = 100;
/// Maximum page size of `GET /v0/executions/{id}/events`.
pub const EVENTS_MAX_LIMIT: usize = 1000;
/// Default page size of the listings that answer a bare JSON array (`GET …/steps`,
/// `GET /v0/agents`, `GET /v0/approvals`). Clients that predate paging ask for no page and
/// read only the first, so it is as large as the maximum.
pub const ARRAY_DEFAULT_LIMIT: usize = 1000;
/// Maximum page size of `GET …/steps`, `GET /v0/agents` and `GET /v0/approvals`.
pub const ARRAY_MAX_LIMIT: usize = 1000;

/// `limit` as a page size: 0 means `default`, and it is capped at `max`.
pub(super) fn page_size(limit: usize, default: usize, max: usize) -> usize {
    if limit == 0 { default } else { limit.min(max) }
}

/// Every item of a listing, walking its pages from the start.
async fn every<T, F, Fut>(mut page: F) -> KernelResult<Vec<T>>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = KernelResult<Page<T>>>,
{
    let mut all = Vec::new();
    let mut after = None;
    loop {
        let next = page(after.take()).await?;
        all.extend(next.items);
        match next.next {
            Some(cursor) => after = Some(cursor),
            None => return Ok(all),
        }
    }
}

impl Kernel {
    /// A page of executions, newest first. `limit` 0 means the default (50); it is capped at
    /// 200. `cursor` is the last id of the previous page.
    pub async fn list_executions(
        &self,
        agent_id: Option<String>,
        status: Option<String>,
        cursor: Option<String>,
        limit: usize,
    ) -> KernelResult<ExecutionList> {
        self.list_executions_matching(ExecutionQuery {
            agent_id,
            status,
            session: None,
            spawned_by: None,
            forked_from: None,
            before_id: cursor,
            limit,
        })
        .await
    }

    /// [`Kernel::list_executions`] with every filter of `query` (a session's turns too).
    /// `limit` 0 means the default (50); it is capped at 200.
    pub async fn list_executions_matching(
        &self,
        mut query: ExecutionQuery,
    ) -> KernelResult<ExecutionList> {
        query.limit = page_size(query.limit, LIST_DEFAULT_LIMIT, LIST_MAX_LIMIT);
        let page = self
            .inner
            .store
            .read(move |tx| tx.executions().page(&query))
            .await?;
        Ok(ExecutionList {
            executions: page.items,
            next_cursor: page.next,
        })
    }

    /// Events with `event_seq > after_seq`, ascending; `limit` 0 means 100, capped at 1000.
    pub async fn events(&self, id: &str, after_seq: u64, limit: usize) -> KernelResult<Vec<Event>> {
        Ok(self.events_page(id, after_seq, limit).await?.items)
    }

    /// [`Kernel::events`] with the cursor of the next page (the last `event_seq`), if any.
    pub async fn events_page(
        &self,
        id: &str,
        after_seq: u64,
        limit: usize,
    ) -> KernelResult<Page<Event>> {
        let limit = page_size(limit, EVENTS_DEFAULT_LIMIT, EVENTS_MAX_LIMIT);
        let id = id.to_owned();
        Ok(self
            .inner
            .store
            .read(move |tx| tx.events().page(&id, after_seq, limit))
            .await?)
    }

    /// Every step of an execution, by step id; `terminal_only` keeps succeeded, failed,
    /// denied and cancelled ones.
    pub async fn steps(&self, id: &str, terminal_only: bool) -> KernelResult<Vec<Step>> {
        every(|after| async move {
            self.steps_page(id, terminal_only, after.as_deref(), 0)
                .await
        })
        .await
    }

    /// [`Kernel::steps`] (every one) as an agent running in this process reads them (for local
    /// replay): it waits for the durable writes it may have seen, not for deferred ones (see
    /// [`Kernel::execution_in_process`]). A deferred write records no outcome (only a step
    /// `executing`, which the agent asks the kernel about), so every outcome the agent replays
    /// from this list is durable.
    pub(crate) async fn steps_in_process(&self, id: &str) -> KernelResult<Vec<Step>> {
        let steps = every(|after| async move {
            self.steps_page_of(id, false, after.as_deref(), 0, false)
                .await
        })
        .await?;
        self.inner.store.settle_durable_writes().await?;
        Ok(steps)
    }

    /// A page of an execution's steps by step id, after step id `after`; `limit` 0 means
    /// [`ARRAY_DEFAULT_LIMIT`], capped at [`ARRAY_MAX_LIMIT`]. An unknown execution has none.
    pub async fn steps_page(
        &self,
        id: &str,
        terminal_only: bool,
        after: Option<&str>,
        limit: usize,
    ) -> KernelResult<Page<Step>> {
        self.steps_page_of(id, terminal_only, after, limit, true)
            .await
    }

    /// [`Kernel::steps_page`], settled or not (the caller then settles).
    async fn steps_page_of(
        &self,
        id: &str,
        terminal_only: bool,
        after: Option<&str>,
        limit: usize,
        settled: bool,
    ) -> KernelResult<Page<Step>> {
        let limit = page_size(limit, ARRAY_DEFAULT_LIMIT, ARRAY_MAX_LIMIT);
        let (id, after) = (id.to_owned(), after.map(str::to_owned));
        let read = move |tx: &mut dyn crate::store::Tx| {
            tx.steps().page(&id, after.as_deref(), terminal_only, limit)
        };
        let store = &self.inner.store;
        Ok(if settled {
            store.read(read).await?
        } else {
            store.read_unsettled(read).await?
        })
    }

    /// Every agent by id, without secrets.
    pub async fn agents(&self) -> KernelResult<Vec<Agent>> {
        every(|after| async move { self.agents_page(after.as_deref(), 0).await }).await
    }

    /// A page of agents by id (without secrets), after id `after`; `limit` as for
    /// [`Kernel::steps_page`].
    pub async fn agents_page(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> KernelResult<Page<Agent>> {
        let limit = page_size(limit, ARRAY_DEFAULT_LIMIT, ARRAY_MAX_LIMIT);
        let after = after.map(str::to_owned);
        let page = self
            .inner
            .store
            .read(move |tx| tx.agents().page(after.as_deref(), limit))
            .await?;
        Ok(Page {
            items: page.items.into_iter().map(public).collect(),
            next: page.next,
        })
    }

    /// Every pending approval, oldest first.
    pub async fn pending_approvals(&self) -> KernelResult<Vec<Approval>> {
        every(|after| async move { self.pending_approvals_page(after.as_deref(), 0).await }).await
    }

    /// A page of pending approvals, oldest first, after approval `after` (`400` if there is
    /// no such approval); `limit` as for [`Kernel::steps_page`].
    pub async fn pending_approvals_page(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> KernelResult<Page<Approval>> {
        let limit = page_size(limit, ARRAY_DEFAULT_LIMIT, ARRAY_MAX_LIMIT);
        let cursor = after.map(str::to_owned);
        let page = {
            let cursor = cursor.clone();
            self.inner
                .store
                .read(move |tx| tx.approvals().pending_page(cursor.as_deref(), limit))
                .await?
        };
        page.ok_or_else(|| {
            KernelError::validation(format!("unknown cursor {:?}", cursor.unwrap_or_default()))
        })
    }
}
