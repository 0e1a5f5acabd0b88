//! The three traits a receipt-native agent implements: its receipt set, its view, and the
//! pairing of both with the agent type.

use crate::receipt::Receipt;

/// The receipt types an agent declares: usually an enum with `#[serde(tag = "type")]`, one
/// variant per wire type (what `#[receipt::receipts]` generates).
pub trait ReceiptSet:
    serde::Serialize + serde::de::DeserializeOwned + Clone + Send + Sync + 'static
{
    /// The declared wire type names, in declaration order.
    const TYPES: &'static [&'static str];
    /// The wire type of this value (its body's `type`).
    fn type_name(&self) -> &'static str;
}

/// An agent's view: a fold over the run chain, applied one receipt at a time in chain order.
///
/// It sees every receipt of the run stream, domain and control receipts alike, and must
/// be a pure function of them: the controller folds incrementally and the remote worker folds
/// the prefix up to a selected head, and both must arrive at the same view.
pub trait AgentView: Clone + Default + Send + Sync + 'static {
    /// Applies one receipt.
    fn apply(&mut self, receipt: &Receipt);
}

/// Ties an agent type to its receipt set and view.
pub trait AgentTypes: Send + Sync + 'static {
    /// The receipts the agent's actions may emit.
    type Receipts: ReceiptSet;
    /// The view folded from the run chain.
    type View: AgentView;
}
