"""Exit 0 when two run manifests hold the same samples, in the same order, apart from the measured seconds and joules
(wall_s, ttft_s, energy_j, certify_s): every output and logits hash, verdict, token count, route and certificate.
Usage: same_samples.py A.json B.json"""
import sys

from graftbench.results.manifest import load_manifest, verify_manifest

MEASURED = {"wall_s", "ttft_s", "energy_j", "certify_s"}


def comparable(path: str) -> list[dict]:
    mismatches, _ = verify_manifest(path)
    if mismatches:
        sys.exit(f"{path} does not verify: {mismatches[0]}")
    return [{k: v for k, v in s.items() if k not in MEASURED} for s in load_manifest(path)["samples"]]


a, b = (comparable(p) for p in sys.argv[1:3])
differ = [x["problem_id"] for x, y in zip(a, b) if x != y]
print(f"{len(a)} and {len(b)} samples; {len(differ)} differ{': ' + ', '.join(differ) if differ else ''}; "
      f"correct {sum(s['correct'] for s in a)} and {sum(s['correct'] for s in b)}; "
      f"certified {sum(s.get('certified') is True for s in a)} and {sum(s.get('certified') is True for s in b)}")
sys.exit(0 if len(a) == len(b) and not differ else 1)
