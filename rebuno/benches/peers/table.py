"""Prints the peer comparison as one Markdown table from the `RESULT {json}` lines in the file
named by argv[1]: p50 per workflow (create+wait), per step, throughput at 64 clients, and each
ratio against ours (the first result whose system starts with "rebuno embedded"). Durability
settings come from `DURABILITY <system>\\t<text>` lines in the same file."""

import json
import sys


def main(path):
    results, durability = [], {}
    with open(path) as f:
        for line in f:
            if line.startswith("RESULT "):
                results.append(json.loads(line[len("RESULT "):]))
            elif line.startswith("DURABILITY "):
                system, _, text = line[len("DURABILITY "):].rstrip("\n").partition("\t")
                durability[system] = text
    if not results:
        sys.exit("no results")
    ours = next((r for r in results if r["system"].startswith("rebuno embedded")), results[0])
    print("| system | durability | workflow p50 | per step | 64 concurrent | p50 vs ours | throughput vs ours |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['system']} | {durability.get(r['system'], '')} "
            f"| {r['workflow_p50_ms']:.1f} ms | {r['step_p50_ms']:.2f} ms "
            f"| {r['steps_per_s_at_64']:,.0f} steps/s "
            f"| {r['workflow_p50_ms'] / ours['workflow_p50_ms']:.2f}x "
            f"| {r['steps_per_s_at_64'] / ours['steps_per_s_at_64']:.2f}x |"
        )


if __name__ == "__main__":
    main(sys.argv[1])
