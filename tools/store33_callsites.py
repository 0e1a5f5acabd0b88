#!/usr/bin/env python3
"""Rewrites the call sites of the store contract to its grouped form.

Usage: python3 tools/store33_callsites.py REPO_ROOT

Rewrites `rebuno/src/**/*.rs` (outside `rebuno/src/store/`) and `rebuno/tests/**/*.rs` by
patterns that depend neither on line numbers nor on file names, so it can run again after other
changes moved code between files. Running it twice changes nothing the second time. The files
it changes are formatted with rustfmt afterwards.

- `tx.put_step(` becomes `tx.steps().put(`, and so on for every method of the flat `Tx` that
  moved into a group (`tx.agents()`, `tx.executions()`, `tx.events()`, `tx.steps()`,
  `tx.approvals()`, `tx.dispatches()`);
- a status passed as text to `steps().in_status` becomes the `StepStatus` it names;
- the store's replica operations go through `Store::replicas` (`store.shared()` becomes
  `store.replicas().is_some()`, `store.lock_execution(id).await?` a match on it, …);
- doc links to the old names point at the new ones.
"""

import os
import re
import subprocess
import sys

# group accessor -> (sub-trait, [(old method of Tx, new method of the group)])
GROUPS = {
    "agents": ("AgentTx", [
        ("agent", "get"), ("agent_secret", "secret"), ("put_agent", "put"),
        ("delete_agent", "delete"), ("agents_page", "page"),
        ("agent_execution_count", "execution_count"),
    ]),
    "executions": ("ExecutionTx", [
        ("execution", "get"), ("execution_by_idempotency_key", "by_idempotency_key"),
        ("execution_state", "state"), ("agent_of", "agent_of"),
        ("execution_policy_bundle", "policy_bundle"), ("put_execution", "put"),
        ("list_executions", "page"), ("executions_past_deadline", "past_deadline"),
        ("delete_terminal_executions_before", "delete_terminal_before"),
        ("execution_counts", "counts"), ("try_lock_execution", "try_lock"),
    ]),
    "events": ("EventTx", [
        ("append_events", "append"), ("record_events", "record"), ("has_event", "has"),
        ("events", "page"),
    ]),
    "steps": ("StepTx", [
        ("step", "get"), ("step_exists", "exists"), ("put_step", "put"),
        ("steps_page", "page"), ("steps_in_status", "in_status"),
        ("has_indeterminate_failure", "has_indeterminate_failure"),
    ]),
    "approvals": ("ApprovalTx", [
        ("approval", "get"), ("put_approval", "put"), ("pending_approvals", "pending"),
        ("pending_approvals_page", "pending_page"),
        ("pending_approval_for_step", "pending_for_step"), ("due_approvals", "due"),
        ("next_approval_timeout", "next_timeout"),
    ]),
    "dispatches": ("DispatchTx", [
        ("dispatch", "get"), ("dispatch_lease", "lease"), ("put_dispatch", "put"),
        ("renew_dispatch", "renew"), ("record_renewal", "record_renewal"),
        ("dispatches_of", "of_execution"), ("claimable_dispatches_except", "claimable_except"),
        ("wake_agent_dispatches", "wake_agent"), ("in_flight_leases", "in_flight_leases"),
        ("in_flight_dispatches", "in_flight"), ("queue_depth", "queue_depth"),
        ("attempt_occurrence", "attempt_occurrence"),
        ("advance_attempt_occurrence", "advance_attempt_occurrence"),
    ]),
}

OLD = {
    old: (accessor, trait, new)
    for accessor, (trait, methods) in GROUPS.items()
    for old, new in methods
}

STEP_STATUSES = {
    "proposed": "Proposed", "allowed": "Allowed", "executing": "Executing",
    "awaiting_approval": "AwaitingApproval", "succeeded": "Succeeded", "failed": "Failed",
    "denied": "Denied", "cancelled": "Cancelled",
}


def calls(text):
    """`tx.old(` (the receiver may end a line, the call start the next) -> `tx.group().new(`."""
    for old, (accessor, _, new) in OLD.items():
        # `tx.events(` is also the new accessor: only a call with arguments is the old method.
        guard = r"(?!\))" if old == accessor else ""
        text = re.sub(
            r"\btx(\s*)\." + old + r"\(" + guard,
            lambda m, a=accessor, n=new: "tx" + m.group(1) + "." + a + "()." + n + "(",
            text,
        )
    return text


def statuses(text, crate):
    """`steps().in_status(x, "executing")` / `(x, StepStatus::Executing.as_str())` -> typed."""
    text = re.sub(
        r"(\.steps\(\)\s*\.in_status\([^,()]*(?:\([^()]*\))?[^,()]*,\s*)"
        r"((?:\w+::)*StepStatus::\w+)\.as_str\(\)\)",
        r"\1\2)",
        text,
    )

    def literal(m):
        return "%s%s::protocol::StepStatus::%s)" % (m.group(1), crate, STEP_STATUSES[m.group(2)])

    return re.sub(
        r"(\.steps\(\)\s*\.in_status\([^,()]*(?:\([^()]*\))?[^,()]*,\s*)\"(\w+)\"\)",
        literal,
        text,
    )


# An argument list without nested calls beyond one level: `(id)`, `(&self.ticket.id)`,
# `(channel, payload)`, `(&format!("x{i}"))`.
ARGS = r"((?:[^()]|\((?:[^()]|\([^()]*\))*\))*)"


def replicas(text):
    """The kernel's use of the store's replica operations, through `Store::replicas`."""
    text = re.sub(r"\.store\.shared\(\)", ".store.replicas().is_some()", text)
    text = re.sub(
        r"\.store\.held_execution_lock\(" + ARGS + r"\)",
        r".store.replicas().and_then(|r| r.held_execution_lock(\1))",
        text,
    )
    text = re.sub(
        r"\.store\.rate_limiter\(\)", ".store.replicas().map(|r| r.rate_limiter())", text
    )
    text = re.sub(
        r"\.store(\s*)\.subscribe\(\)", r".store\1.replicas().map(|r| r.subscribe())", text
    )
    text = re.sub(
        r"([\w.]+)\.store\.lock_execution\(" + ARGS + r"\)\.await\?",
        r"match \1.store.replicas() {"
        r" Some(r) => Some(r.lock_execution(\2).await?), None => None }",
        text,
    )
    text = re.sub(
        r"([\w.]+)\.store\.publish\(" + ARGS + r"\)\.await",
        r"match \1.store.replicas() { Some(r) => r.publish(\2).await, None => Ok(()) }",
        text,
    )
    return text


def conformance(text):
    """The replica conformance bodies call a shared store's operations through the capability."""
    stores = r"\b(a|b|c|store|sa|sb)"
    text = re.sub(stores + r"\.shared\(\)", r"\1.replicas().is_some()", text)
    text = re.sub(
        stores + r"(\s*)\.lock_execution\(",
        r"\1\2.replicas().unwrap().lock_execution(",
        text,
    )
    # The lock of a shared store is no longer optional.
    text = re.sub(
        r"(\.replicas\(\)\.unwrap\(\)\.lock_execution\(" + ARGS + r"\)\s*\.await\s*\.unwrap\(\))"
        r"\s*\.expect\(\"a shared store locks\"\)",
        r"\1",
        text,
    )
    text = re.sub(
        stores + r"\.rate_limiter\(\)\.unwrap\(\)", r"\1.replicas().unwrap().rate_limiter()", text
    )
    text = re.sub(
        stores + r"\.subscribe\(\)\.(?:unwrap\(\)|expect\(\"[^\"]*\"\))",
        r"\1.replicas().unwrap().subscribe()",
        text,
    )
    text = re.sub(
        stores + r"(\s*)\.publish\(channels::", r"\1\2.replicas().unwrap().publish(channels::",
        text,
    )
    return text


def docs(text):
    """Doc links to the old names: `[`Tx::old`]` -> `[`Group::new`]` with a target."""
    moved = {
        "Store::shared": ("Store::replicas", "crate::store::Store::replicas"),
        "Store::lock_execution": (
            "Replicated::lock_execution", "crate::store::Replicated::lock_execution"),
        "Store::held_execution_lock": (
            "Replicated::held_execution_lock", "crate::store::Replicated::held_execution_lock"),
        "Store::publish": ("Replicated::publish", "crate::store::Replicated::publish"),
        "Store::subscribe": ("Replicated::subscribe", "crate::store::Replicated::subscribe"),
        "Store::rate_limiter": ("Replicated::rate_limiter", "crate::store::Replicated::rate_limiter"),
    }
    for old, (accessor, trait, new) in OLD.items():
        # `Tx::events` also names the new accessor: a link to it is left alone.
        if old != accessor:
            moved["Tx::" + old] = (trait + "::" + new, "crate::store::%s::%s" % (trait, new))
    for old, (label, target) in moved.items():
        # Reference definitions and explicit targets.
        text = text.replace("crate::store::" + old + "\n", target + "\n")
        text = re.sub(r"crate::store::" + re.escape(old) + r"\b(?!_)", target, text)
        text = text.replace("[`%s`]:" % old, "[`%s`]:" % label)
        text = text.replace("[`%s`](" % old, "[`%s`](" % label)
        has_definition = ("[`%s`]:" % label) in text
        replacement = "[`%s`]" % label if has_definition else "[`%s`](%s)" % (label, target)
        text = re.sub(r"\[`" + re.escape(old) + r"`\](?![(:])", lambda _m: replacement, text)
    return text


def rewrite(path, crate, in_conformance):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    new = calls(text)
    new = statuses(new, crate)
    new = replicas(new)
    if in_conformance:
        new = conformance(new)
    new = docs(new)
    if new != text:
        with open(path, "w", encoding="utf-8") as f:
            f.write(new)
        return True
    return False


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    changed = []
    for top, crate in (("rebuno/src", "crate"), ("rebuno/tests", "rebuno"), ("rebuno/benches", "rebuno"), ("tests/support/src", "rebuno")):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            rel = os.path.relpath(dirpath, root)
            if rel.startswith(os.path.join("rebuno", "src", "store")):
                continue
            for name in sorted(files):
                if not name.endswith(".rs"):
                    continue
                path = os.path.join(dirpath, name)
                # The conformance bodies call a store directly; the kernel tests' `a`, `b` are
                # kernels, whose operations keep their names.
                in_conformance = "store_conformance" in path or name == "kernel_pg.rs"
                if rewrite(path, crate, in_conformance):
                    changed.append(os.path.relpath(path, root))
    # The rewritten calls are longer: lay them out as `cargo fmt` would.
    if changed:
        subprocess.run(
            ["rustfmt", "--edition", "2024"] + [os.path.join(root, p) for p in changed],
            check=True,
        )
    for path in changed:
        print(path)


if __name__ == "__main__":
    main()
