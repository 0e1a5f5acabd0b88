"""The peer-comparison workload on DBOS (see README.md beside this file): a workflow of 10
sequential durable steps (`@DBOS.step`), each returning a small JSON value, in this process with
its system database on PostgreSQL ($DBOS_DATABASE_URL); 300 workflows one after another, then 64
client threads x 25 workflows at once. A direct call of a workflow function returns once the
workflow completed, so it is create+wait. Prints `RESULT {json}`."""

import json
import os
import threading
import time

from dbos import DBOS, DBOSConfig

STEPS = 10
RUNS = int(os.environ.get("REBUNO_BENCH_RUNS", 300))
CLIENTS = int(os.environ.get("REBUNO_BENCH_CLIENTS", 64))
PER_CLIENT = int(os.environ.get("REBUNO_BENCH_PER_CLIENT", 25))

config: DBOSConfig = {
    "name": "peers-workload",
    "system_database_url": os.environ["DBOS_DATABASE_URL"],
    # Room for the 64 client threads' workflows at once.
    "sys_db_pool_size": 80,
}
DBOS(config=config)


@DBOS.step()
def step(i: int) -> dict:
    return {"step": i, "ok": True}


@DBOS.workflow()
def workflow(n: int) -> dict:
    last = None
    for i in range(STEPS):
        last = step(i)
    return {"input": {"n": n}, "last": last}


def call(n: int) -> float:
    started = time.perf_counter()
    out = workflow(n)
    assert out["last"]["step"] == STEPS - 1, out
    return (time.perf_counter() - started) * 1e3


def percentile(xs, p):
    s = sorted(xs)
    return s[round((len(s) - 1) * p)]


def main():
    DBOS.launch()
    for n in range(10):
        call(n)
    lat = [call(n) for n in range(RUNS)]

    def client(c):
        for n in range(PER_CLIENT):
            call(c * PER_CLIENT + n)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    p50 = percentile(lat, 0.5)
    result = {
        "system": os.environ.get("SYSTEM_NAME", "DBOS"),
        "workflow_p50_ms": p50,
        "workflow_p99_ms": percentile(lat, 0.99),
        "step_p50_ms": p50 / STEPS,
        "steps_per_s_at_64": CLIENTS * PER_CLIENT * STEPS / elapsed,
        "runs": RUNS,
        "clients": CLIENTS,
        "per_client": PER_CLIENT,
    }
    print("RESULT " + json.dumps(result), flush=True)
    DBOS.destroy()


if __name__ == "__main__":
    main()
