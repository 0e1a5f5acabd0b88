// Every typed fold of an agent's view is checked against the agent's receipt set, with no
// option to write: a misspelt type is an error at the name, naming the closest declared type
// (or control type); control types are readable.
use receipt::agent::ActionContext;

#[receipt::receipts]
enum Kb {
    #[receipt("kb.query")]
    Query { text: String },
    #[receipt("kb.found")]
    Found { answer: String },
}

#[receipt::view]
struct KbView {
    #[view(last = "kb.query")]
    query: Option<serde_json::Value>,
    #[view(exists = "kb.fund")]
    found: bool,
    #[view(count = "human.requestd")]
    asked: usize,
    #[view(exists = "human.requested")]
    waiting: bool,
}

struct KbAgent;

#[receipt::agent(id = "kb", version = "1.0.0", receipts = Kb, view = KbView)]
impl KbAgent {
    #[action(kind = "tool", side_effects = "query", when = Self::pending)]
    async fn search(&self, ctx: ActionContext<Self>) -> receipt::Result<()> {
        ctx.emit(Kb::Found { answer: "42".into() }).await
    }

    fn pending(view: &KbView) -> bool {
        view.query.is_some() && !view.found
    }

    #[goal]
    fn done(view: &KbView) -> bool {
        view.found
    }
}

fn main() {}
