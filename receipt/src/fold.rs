//! Folding chains into state: the [`Reducer`] trait the runtime folds incrementally, and the
//! view helpers `on(type).all() / last() / exists()` and `chain()` over a whole chain.
//!
//! The receipt type is the body's string `type` field (`unknown` when absent). Helpers build a
//! per-type index once, so each `on(type)` is a lookup, not a scan.

use crate::receipt::Receipt;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::HashMap;

/// A fold from receipts to state, applied one receipt at a time in chain order.
///
/// The runtime caches the state per stream and applies only receipts appended since; change
/// [`Reducer::VERSION`] when `apply` changes meaning, so cached states are dropped.
pub trait Reducer: Send + Sync + 'static {
    /// The folded state.
    type State: Clone + Send + Sync + 'static;
    /// Bumped when the fold's meaning changes.
    const VERSION: u32 = 1;
    /// The state of an empty chain.
    fn initial(&self) -> Self::State;
    /// Applies one receipt.
    fn apply(&self, state: &mut Self::State, receipt: &Receipt);
}

/// Folds a whole chain with a reducer.
pub fn fold_chain<R: Reducer>(reducer: &R, chain: &[Receipt]) -> R::State {
    let mut state = reducer.initial();
    for r in chain {
        reducer.apply(&mut state, r);
    }
    state
}

/// A receipt type with a fixed wire name, for typed lookups ([`View::on_type`]).
pub trait ReceiptType: DeserializeOwned {
    /// The wire type name (the body's `type`).
    const TYPE: &'static str;
}

/// Read helpers over one chain (what an agent's view function is given).
pub struct View<'a> {
    chain: &'a [Receipt],
    index: HashMap<&'a str, Vec<usize>>,
}

impl<'a> View<'a> {
    /// Indexes `chain` by event type.
    pub fn new(chain: &'a [Receipt]) -> Self {
        let mut index: HashMap<&'a str, Vec<usize>> = HashMap::new();
        for (i, r) in chain.iter().enumerate() {
            index.entry(r.event_type()).or_default().push(i);
        }
        View { chain, index }
    }

    /// Receipts of one type.
    pub fn on(&self, event_type: &str) -> On<'_, 'a> {
        On {
            view: self,
            positions: self.index.get(event_type).map_or(&[], Vec::as_slice),
        }
    }

    /// Typed receipts of one type.
    pub fn on_type<T: ReceiptType>(&self) -> OnType<'_, 'a, T> {
        OnType {
            on: self.on(T::TYPE),
            _t: std::marker::PhantomData,
        }
    }

    /// The raw chain, control receipts included.
    pub fn chain(&self) -> &'a [Receipt] {
        self.chain
    }
}

/// Receipts of one type in a [`View`].
pub struct On<'v, 'a> {
    view: &'v View<'a>,
    positions: &'v [usize],
}

impl<'a> On<'_, 'a> {
    /// Bodies of every receipt of the type, oldest first.
    pub fn all(&self) -> Vec<&'a Value> {
        self.positions
            .iter()
            .map(|&i| self.view.chain[i].body())
            .collect()
    }
    /// Body of the newest receipt of the type.
    pub fn last(&self) -> Option<&'a Value> {
        self.positions.last().map(|&i| self.view.chain[i].body())
    }
    /// Whether at least one exists.
    pub fn exists(&self) -> bool {
        !self.positions.is_empty()
    }
    /// How many exist.
    pub fn count(&self) -> usize {
        self.positions.len()
    }
    /// The receipts themselves, oldest first.
    pub fn receipts(&self) -> Vec<&'a Receipt> {
        self.positions
            .iter()
            .map(|&i| &self.view.chain[i])
            .collect()
    }
}

/// Typed receipts of one type in a [`View`].
pub struct OnType<'v, 'a, T> {
    on: On<'v, 'a>,
    _t: std::marker::PhantomData<T>,
}

impl<T: ReceiptType> OnType<'_, '_, T> {
    /// Every body, deserialized, oldest first.
    pub fn all(&self) -> Result<Vec<T>, serde_json::Error> {
        self.on.all().into_iter().map(T::deserialize).collect()
    }
    /// The newest body, deserialized.
    pub fn last(&self) -> Result<Option<T>, serde_json::Error> {
        self.on.last().map(T::deserialize).transpose()
    }
    /// Whether at least one exists.
    pub fn exists(&self) -> bool {
        self.on.exists()
    }
    /// How many exist.
    pub fn count(&self) -> usize {
        self.on.count()
    }
}
