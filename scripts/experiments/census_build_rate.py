"""How many of the census's models build and run in eager: every spec of ``--suite census``
(workloads/zoo/census.py) made into its workload, built at the small size and called once,
each in a child process of its own (a model that crashes or hangs costs its own row), a few
at a time. Prints the counts per source and the most common reasons a model did not build,
and writes every row to a JSON file.

    python scripts/experiments/census_build_rate.py [OUT.json] [JOBS=2] [TIMEOUT_S=120] [KIND]

KIND (``text_image``, ``image``...) attempts only the census's models of that input kind.

Evidence for the census page (issue 57): what the census attempts and what builds.
"""
import collections
import concurrent.futures
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHILD = r'''
import json, re, sys, torch
from workloads import build_model, make_inputs
from workloads.zoo.census import census_workload
w = census_workload(sys.argv[1])
row = {"spec": sys.argv[1], "name": w.name, "stage": "intake"}
if "unbuilt" in w.tags:
    row["error"] = w.description
else:
    try:
        row["stage"] = "build"
        model = build_model(w, "small")
        row["params"] = sum(p.numel() for p in model.parameters())
        rule = re.search(r"shrunk by the '(\w+)' rule", getattr(model, "build_note", ""))
        row["rule"] = rule.group(1) if rule else "tiny"
        if "prompt: " in getattr(model, "build_note", ""):
            row["prompt"] = model.build_note.split("prompt: ")[1]
        row["stage"] = "forward"
        with torch.no_grad():
            out = model(*make_inputs(w.input_specs("small")))
        row["stage"], row["output"] = "ok", list(getattr(out, "shape", []))
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
print(json.dumps(row))
'''


def attempt(spec: str, timeout_s: float) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")
    try:
        proc = subprocess.run([sys.executable, "-c", CHILD, spec], capture_output=True, text=True, cwd=ROOT,
                              env=env, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"spec": spec, "stage": "timeout", "error": f"no answer in {timeout_s:g} s"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if lines:
        return json.loads(lines[-1])
    tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
    return {"spec": spec, "stage": "crash", "error": f"exit {proc.returncode}: {tail[:200]}"}


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "census_build_rate.json")
    jobs = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    timeout_s = float(sys.argv[3]) if len(sys.argv) > 3 else 120.0
    sys.path.insert(0, str(ROOT))
    from workloads.zoo.census import census_specs

    specs = census_specs()
    if len(sys.argv) > 4:
        from workloads.zoo.census import census_workload

        specs = tuple(s for s in specs if census_workload(s).sizes["small"].get("kind") == sys.argv[4])
    start = time.time()
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        rows = list(pool.map(lambda s: attempt(s, timeout_s), specs))
    out.write_text(json.dumps(rows, indent=1))
    print(f"{len(rows)} models attempted in {time.time() - start:.0f} s ({jobs} at a time)")
    print("| source | attempted | built and ran | intake failed | build failed | forward failed | crash/timeout |")
    print("|---|---|---|---|---|---|---|")
    for source in ("hf", "torchvision", "timm"):
        mine = [r for r in rows if r["spec"].startswith(source + ":")]
        stages = collections.Counter(r["stage"] for r in mine)
        print(f"| {source} | {len(mine)} | {stages['ok']} | {stages['intake']} | {stages['build']} | "
              f"{stages['forward']} | {stages['crash'] + stages['timeout']} |")
    rules = collections.Counter(r.get("rule", "tiny") for r in rows if r["stage"] == "ok" and r["spec"].startswith("hf:"))
    print(f"\ntransformers models built by each shrink rule (workloads/zoo/census.py RULES): {dict(rules)}")
    reasons = collections.Counter(r["error"].split(":")[0] if r["stage"] != "intake" else
                                  r["error"].split("(", 1)[-1][:70] for r in rows if r["stage"] != "ok")
    print("\nmost common reasons:")
    for reason, count in reasons.most_common(15):
        print(f"  {count:4d}  {reason}")


if __name__ == "__main__":
    main()
