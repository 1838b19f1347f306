"""Judging a run from what the shim recorded in each rank: the checks that exit codes cannot show.

Each function takes the per-rank facts (rank_shim.py's `Facts.to_json`, by rank) and returns one
`Check`. A check fails only on evidence; where the evidence is missing (a rank did not finish,
the data did not come from a DataLoader) it says so as "unchecked" instead of passing.

- `replicas`: every DistributedDataParallel model ends with the same parameters on every rank,
  and so do parameters an optimizer stepped outside DDP; a script that runs `backward()` with no
  DDP model at all fails here.
- `forward_through_ddp`: a DDP model whose forward never ran with gradients while `backward()`
  did, or whose module ran forward directly (`model.module(x)`, a custom method) before a
  `backward()` with no DDP forward in between, was trained around DDP.
- `data_sharding`: the DataLoaders iterated before `backward()` give each rank its own samples
  (disjoint indices apart from padding; different first batches for an IterableDataset), and a
  shuffling DistributedSampler changes order between epochs (set_epoch).
- `side_effects`: files written by ranks other than 0; two ranks writing one path fails.
- `process_group`: initialized once and destroyed once on every rank.

Standard library only.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# Parameters compare equal within this tolerance (DDP keeps replicas bit-identical in practice).
REL_TOL = 1e-5
ABS_TOL = 1e-6

OK, FAIL, HANG, INFO, UNCHECKED = "ok", "FAIL", "hang", "info", "unchecked"

Facts = Mapping[int, Mapping]  # rank -> what its shim recorded


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # OK, FAIL, HANG, INFO or UNCHECKED
    detail: str
    evidence: Mapping = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status not in (FAIL, HANG)


def replicas(facts: Facts, finished: bool) -> Check:
    name = "replicas"
    if not finished:
        return Check(name, UNCHECKED, "not every rank finished")
    first = facts[min(facts)]
    models = {rank: f.get("ddp", []) for rank, f in facts.items()}
    counts = {rank: len(m) for rank, m in models.items()}
    backward = first.get("backward", 0)
    if not any(counts.values()):
        if backward:
            return Check(
                name, FAIL,
                f"no DistributedDataParallel model, yet backward() ran {backward} time(s) on rank "
                f"{min(facts)}: gradients are never averaged across ranks",
                {"ddp_models": 0, "backward": backward},
            )  # fmt: skip
        return Check(name, UNCHECKED, "no DistributedDataParallel model and no backward(): nothing trained")
    if len(set(counts.values())) > 1:
        return Check(name, FAIL, f"ranks wrapped different numbers of models in DDP: {_by_rank(counts)}", {"ddp_models": counts})

    problems, evidence = [], {"models": [], "outside_ddp": []}
    params = 0
    for index, model in enumerate(models[min(facts)]):
        label = _model_label(model)
        mismatch = _first_mismatch({rank: m[index]["params"] for rank, m in models.items()})
        params += len(model["params"])
        evidence["models"].append({"model": label, "params": len(model["params"]), "mismatch": mismatch})
        if mismatch:
            problems.append(f"{label}: {_describe_mismatch(mismatch)}")

    optimizers = {rank: f.get("optimizers", []) for rank, f in facts.items()}
    outside = 0
    if len({len(o) for o in optimizers.values()}) == 1:
        for index, optimizer in enumerate(optimizers[min(facts)]):
            if not optimizer["outside_ddp"]:
                continue
            label = f"{optimizer['type']} (first step at {optimizer['site'] or '?'})"
            mismatch = _first_mismatch({rank: o[index]["outside_ddp"] for rank, o in optimizers.items()})
            outside += len(optimizer["outside_ddp"])
            evidence["outside_ddp"].append({"optimizer": label, "params": len(optimizer["outside_ddp"]), "mismatch": mismatch})
            if mismatch:
                problems.append(
                    f"optimizer {label} trains {len(optimizer['outside_ddp'])} parameter(s) outside DDP and "
                    f"they differ across ranks: {_describe_mismatch(mismatch)}"
                )
    if problems:
        return Check(name, FAIL, "replicas diverged: " + "; ".join(problems), evidence)
    steps = first.get("steps", 0)
    detail = (
        f"{len(models[min(facts)])} DDP model(s), {params} parameter tensor(s) identical on "
        f"{len(facts)} ranks after {steps} optimizer step(s)"
    )
    if outside:
        detail += f"; {outside} parameter tensor(s) trained outside DDP are identical too"
    return Check(name, OK, detail, evidence)


def forward_through_ddp(facts: Facts, finished: bool) -> Check:
    name = "forward through DDP"
    if not finished:
        return Check(name, UNCHECKED, "not every rank finished")
    first = facts[min(facts)]
    backward = first.get("backward", 0)
    if not first.get("ddp"):
        return Check(name, UNCHECKED, "no DistributedDataParallel model")
    if not backward:
        return Check(name, INFO, "backward() never ran")
    ranks = sorted(facts)
    problems, parts, evidence = [], [], []
    for index, model in enumerate(first["ddp"]):
        label = _model_label(model)
        per_rank = {rank: facts[rank]["ddp"][index] for rank in ranks if index < len(facts[rank].get("ddp", []))}
        evidence.append({
            "model": label,
            **{key: {str(rank): m[key] for rank, m in per_rank.items()} for key in _FORWARD_COUNTS},
        })  # fmt: skip
        if all(m.get("superseded") and m["forward_grad"] == 0 for m in per_rank.values()):
            parts.append(f"{label}: wrapped again before it ran (the later wrapper trains it)")
            continue
        never = [rank for rank, m in per_rank.items() if m["forward_grad"] == 0]
        bypassed = [rank for rank, m in per_rank.items() if m["forward_grad"] and m["bypassed_backward"]]
        if never:
            problems.append(
                f"{label} never ran forward with gradients through DDP while backward() ran {backward} time(s)"
                f"{_on_ranks(never, ranks)}: its gradients were never averaged" + _direct_note(per_rank[never[0]])
            )
        elif bypassed:
            count = per_rank[bypassed[0]]["bypassed_backward"]
            problems.append(
                f"{count} backward() call(s){_on_ranks(bypassed, ranks)} followed forwards of {label}'s module "
                f"that skipped DDP (model.module(...) or a custom method) with no DDP forward in between"
            )
        else:
            parts.append(f"{label}: {model['forward_grad']} forward(s) with gradients through DDP")
    if problems:
        return Check(name, FAIL, "training bypassed DDP: " + "; ".join(problems), {"models": evidence})
    return Check(name, OK, "; ".join(parts), {"models": evidence})


_FORWARD_COUNTS = ("forward_grad", "direct_forward_grad", "bypassed_backward")


def data_sharding(facts: Facts, finished: bool) -> Check:
    name = "data sharding"
    if not finished:
        return Check(name, UNCHECKED, "not every rank finished")
    ranks = sorted(facts)
    first = facts[ranks[0]]
    backward = first.get("backward", 0)
    if not backward:
        return Check(name, INFO, "backward() never ran: no training data to check")
    world = len(ranks)
    if world < 2:  # one rank has nobody to share with: a sampler drawn alike everywhere is no finding
        return Check(name, INFO, f"one rank: there is no other rank to split the data with ({backward} backward() call(s))")
    loaders = {rank: {loader["index"]: loader for loader in facts[rank].get("loaders", [])} for rank in ranks}
    training = [loader for loader in first.get("loaders", []) if loader["backward"] > 0]
    problems, passed, evidence = [], [], []
    for loader in training:
        per_rank = [loaders[rank].get(loader["index"]) for rank in ranks]
        label = _loader_label(loader)
        if any(entry is None for entry in per_rank):
            problems.append(f"{label}: not iterated on every rank")
            continue
        verdict, detail, facts_of_loader = _judge_loader(per_rank, world)
        evidence.append({"loader": label, "verdict": verdict, **facts_of_loader})
        (problems if verdict == FAIL else passed).append(f"{label}: {detail}")

    problems.extend(_rebuilt_in_one_order(training))

    without = first.get("backward_without_loader", 0)
    unchecked = ""
    if without:
        unchecked = (
            f"{without} of {backward} backward() call(s) on rank {ranks[0]} came before any DataLoader batch or after a DataLoader's "
            "pass had ended (batches the script makes itself): that data is unchecked"
        )
        inputs = [[m.get("first_unfed_input") for m in facts[rank].get("ddp", [])] for rank in ranks]
        if inputs[0] and all(i == inputs[0] for i in inputs[1:]):
            unchecked += " (the first of those inputs were identical on every rank)"
    if problems:
        return Check(name, FAIL, "; ".join(problems + ([unchecked] if unchecked else [])), {"loaders": evidence})
    if not training:
        return Check(name, UNCHECKED, unchecked or "no DataLoader fed the training", {"loaders": evidence})
    detail = "; ".join(passed + ([unchecked] if unchecked else []))
    return Check(name, UNCHECKED if unchecked else OK, detail, {"loaders": evidence})


def _judge_loader(per_rank: Sequence[Mapping], world: int) -> tuple[str, str, dict]:
    """(verdict, detail, evidence) for one training DataLoader, from its facts on every rank."""
    head = per_rank[0]
    if head["iterable"]:
        batches = [entry["first_batch"] for entry in per_rank]
        if all(batch == batches[0] for batch in batches[1:]):
            return FAIL, "an IterableDataset that yields the same first batch on every rank (the stream is not split by rank)", {}
        return OK, "IterableDataset: the first batches differ across ranks", {}

    indices = [entry["indices"] for entry in per_rank]
    seen: dict[object, int] = {}
    for rank_indices in indices:
        for index in set(rank_indices):
            seen[index] = seen.get(index, 0) + 1
    shared = sum(1 for count in seen.values() if count > 1)
    n = head["dataset_len"]
    padding = (math.ceil(n / world) * world - n) if n else world - 1
    sampler = head["batch_sampler"] if head["sampler"] in (None, "NoneType") else head["sampler"]
    evidence = {
        "sampler": sampler, "distributed": head["distributed"], "dataset_len": n,
        "sampler_len": head["sampler_len"], "indices_per_rank": [len(i) for i in indices], "shared_indices": shared,
    }  # fmt: skip
    of = f"{shared} of {len(seen)} sample indices"
    if head["distributed"]:
        if shared > padding:
            return FAIL, f"the ranks' DistributedSamplers overlap: {of} were drawn on more than one rank (indices of the base dataset, through any Subset: do the ranks build different Subsets, from a split drawn per process, or share one sampler seed?)", evidence
        # A preview pass (`next(iter(loader))`) before set_epoch(0) shares epoch 0's order: only a
        # sampler whose set_epoch() never ran repeats its order for want of it.
        never_set = not head.get("set_epoch", False)
        if head["shuffle"] and head["passes"] > 1 and len(head["pass_heads"]) > 1 and head["pass_heads"][0] == head["pass_heads"][1] and never_set:
            return FAIL, "a shuffling DistributedSampler visits the samples in the same order every epoch: set_epoch() is not called", evidence
        return OK, f"{sampler}: disjoint sample indices on {world} ranks", evidence
    # `RandomSampler(ds, num_samples=k)`: a draw of some samples each epoch, not a pass over all of them
    some = head["sampler"] == "RandomSampler" and head["sampler_len"] and n and head["sampler_len"] * world <= n
    if head["replacement"] or some:
        heads = [entry["pass_heads"][0] if entry["pass_heads"] else None for entry in per_rank]
        if all(h == heads[0] for h in heads[1:]):
            return FAIL, f"{sampler} draws the same samples on every rank", evidence
        how = "with replacement" if head["replacement"] else f"{head['sampler_len']} of {n} samples a pass on each rank"
        return OK, f"{sampler} draws {how} and the draws differ across ranks (not a partition)", evidence
    if shared > padding:
        return FAIL, f"{sampler} is not distributed: {of} were trained on by more than one rank", evidence
    if head["sampler_len"] and n and head["sampler_len"] * world > n + world:
        return FAIL, (
            f"{sampler} is not distributed: every rank's epoch covers all {n} samples"
        ), evidence
    return OK, f"{sampler}: disjoint sample indices on {world} ranks", evidence


def _rebuilt_in_one_order(training: Sequence[Mapping]) -> list[str]:
    """Loaders built anew for each pass at one site (a curriculum's rebuilt loader) whose shuffling
    DistributedSamplers never had set_epoch() called: each starts at epoch 0, so each pass repeats
    the first one's order, which no single loader's facts show."""
    by_site: dict[str, list[Mapping]] = {}
    for loader in training:
        if loader["distributed"] and loader["shuffle"] and loader["pass_heads"] and loader["site"]:
            by_site.setdefault(loader["site"], []).append(loader)
    problems = []
    for loaders in by_site.values():
        if len(loaders) < 2 or any(loader.get("set_epoch", False) for loader in loaders):
            continue
        heads = [loader["pass_heads"][0] for loader in loaders]
        if all(head == heads[0] for head in heads[1:]):
            problems.append(
                f"{_loader_label(loaders[0])}: a shuffling DistributedSampler built anew for each of {len(loaders)} passes "
                "visits the samples in the same order every epoch: set_epoch(epoch) is not called on the new sampler"
            )
    return problems


def side_effects(facts: Facts, roots: Sequence[Path], workdir: Path, written: Sequence[Path], shared_roots: Sequence[Path] = ()) -> Check:
    """Writes under `roots` (the scratch folder, the script's folder) by rank, from the shim's
    records; and under `shared_roots` (the machine's temp folder) those the script itself makes,
    not a library's temporary files."""
    name = "side effects"
    if not facts:
        return Check(name, UNCHECKED, "no rank recorded its writes")
    by_path: dict[str, dict[int, Mapping]] = {}
    for rank, rank_facts in sorted(facts.items()):
        for write in rank_facts.get("writes", []):
            path = write["path"]
            # in the temp folder, what the script writes itself: not `os.open` (tempfile.mkstemp's, a library's scratch file)
            if (_under(path, roots) or (_under(path, shared_roots) and write.get("site") and write.get("how") != "os.open")) and not _library_cache(path):
                by_path.setdefault(write["path"], {})[rank] = write
    shown = {path: _display(path, workdir) for path in by_path}
    shared = {path: writers for path, writers in by_path.items() if len(writers) > 1}
    others = {path: writers for path, writers in by_path.items() if set(writers) - {0}}
    attributed = set(by_path)
    unknown = [str(p) for p in written if str(p) not in attributed]
    evidence = {
        "shared": [{"path": shown[p], "ranks": sorted(w), "how": _hows(w)} for p, w in shared.items()],
        "not_rank_0": [{"path": shown[p], "ranks": sorted(w), "how": _hows(w)} for p, w in others.items()],
        "writer_unknown": [_display(p, workdir) for p in unknown],
    }
    if shared:
        listed = ", ".join(f"{shown[p]} (ranks {_ranks(sorted(w))}{_site(w)})" for p, w in list(shared.items())[:4])
        more = f" (+{len(shared) - 4} more)" if len(shared) > 4 else ""
        detail = f"{len(shared)} path(s) written by more than one rank: {listed}{more}"
        own = [p for p in others if p not in shared]
        if own:
            detail += f"; ranks other than 0 also wrote {', '.join(shown[p] for p in own[:4])}"
        return Check(name, FAIL, detail, evidence)
    if others:
        listed = ", ".join(f"{shown[p]} (rank {_ranks(sorted(w))})" for p, w in list(others.items())[:4])
        return Check(name, OK, f"no path written by two ranks; ranks other than 0 wrote {len(others)}: {listed}", evidence)
    detail = f"{len(by_path)} file(s) written, all by rank 0" if by_path else "no file written"
    if unknown:
        detail += f"; {len(unknown)} more changed in the scratch folder by an unknown writer"
    return Check(name, OK, detail, evidence)


def process_group(facts: Facts, exit_codes: Mapping[int, int | None]) -> Check:
    name = "process group"
    if not facts:
        return Check(name, UNCHECKED, "no rank recorded its process group")
    found: dict[str, list[int]] = {}  # problem -> ranks
    stopped = False
    for rank, rank_facts in sorted(facts.items()):
        init, destroy = rank_facts.get("pg_init", 0), rank_facts.get("pg_destroy", 0)
        stopped = stopped or bool(rank_facts.get("stopped"))
        if init != 1:
            found.setdefault("never initialized" if not init else f"initialized {_times(init)}", []).append(rank)
        elif exit_codes.get(rank) == 0 and not rank_facts.get("stopped") and destroy != 1:
            found.setdefault("never destroyed" if not destroy else f"destroyed {_times(destroy)}", []).append(rank)
    problems = [f"{what} on rank(s) {_ranks(ranks)}" for what, ranks in found.items()]
    evidence = {str(rank): {"init": f.get("pg_init", 0), "destroy": f.get("pg_destroy", 0)} for rank, f in facts.items()}
    if problems:
        return Check(name, FAIL, "the default process group was " + "; ".join(problems), evidence)
    backend = facts[min(facts)].get("backend") or "?"
    if stopped:
        return Check(name, OK, f"initialized once on every rank ({backend}); teardown not reached: stopped at --steps", evidence)
    return Check(name, OK, f"initialized once and destroyed once on every rank ({backend})", evidence)


# -- helpers -----------------------------------------------------------------------------------


def _first_mismatch(params_by_rank: Mapping[int, Sequence[Mapping]]) -> dict | None:
    ranks = sorted(params_by_rank)
    reference = params_by_rank[ranks[0]]
    for rank in ranks[1:]:
        other = params_by_rank[rank]
        if len(other) != len(reference):
            return {"ranks": [ranks[0], rank], "reason": f"{len(reference)} vs {len(other)} parameters"}
        for mine, theirs in zip(reference, other):
            if not _same_values(mine, theirs):
                return {"ranks": [ranks[0], rank], "param": mine.get("name"), "values": [_short(mine), _short(theirs)]}
    return None


def _same_values(a: Mapping, b: Mapping) -> bool:
    if "error" in a or "error" in b:
        return True  # not comparable (a meta or sparse tensor): not evidence of divergence
    if a["shape"] != b["shape"]:
        return False
    pairs = [(a["sum"], b["sum"]), (a["sumsq"], b["sumsq"]), *zip(a["sample"], b["sample"])]
    return all(_close(x, y) for x, y in pairs)


def _close(x: object, y: object) -> bool:
    if isinstance(x, (int, float)) and isinstance(y, (int, float)):
        return math.isclose(x, y, rel_tol=REL_TOL, abs_tol=ABS_TOL)
    return x == y  # "nan" and "inf" are recorded as text


def _short(fingerprint: Mapping) -> dict:
    return {"shape": fingerprint["shape"], "sum": fingerprint["sum"], "first": fingerprint["sample"][:2]}


def _describe_mismatch(mismatch: Mapping) -> str:
    ranks = mismatch["ranks"]
    if "param" not in mismatch:
        return f"ranks {ranks[0]} and {ranks[1]} have {mismatch['reason']}"
    values = mismatch["values"]
    return (
        f"{mismatch['param']} differs between ranks {ranks[0]} and {ranks[1]} "
        f"(sum {_number(values[0]['sum'])} vs {_number(values[1]['sum'])})"
    )


def _number(value: object) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _model_label(model: Mapping) -> str:
    return f"{model['module']} (wrapped at {model['site'] or '?'})"


def _loader_label(loader: Mapping) -> str:
    return f"DataLoader over {loader['dataset']} (iterated at {loader['site'] or '?'})"


def _on_ranks(ranks: Sequence[int], every: Sequence[int]) -> str:
    return " on every rank" if list(ranks) == list(every) else f" on rank(s) {_ranks(ranks)}"


def _direct_note(model: Mapping) -> str:
    direct = model.get("direct_forward_grad", 0)
    if not direct:
        return ""
    return f"; its module ran forward {direct} time(s) directly (model.module(...) or a custom method)"


# Folders libraries keep their caches in, under the temp folder (torch.compile's, Triton's, bytecode)
LIBRARY_CACHES = ("torchinductor_", "triton", "__pycache__", "matplotlib-", "tmp_torch_extensions", "torch_extensions")


def _library_cache(path: str) -> bool:
    return any(part.startswith(LIBRARY_CACHES) for part in Path(path).parts)


def _under(path: str, roots: Sequence[Path]) -> bool:
    return any(path == str(root) or path.startswith(str(root) + os.sep) for root in roots)


def _display(path: str, workdir: Path) -> str:
    try:
        return str(Path(path).relative_to(workdir))
    except ValueError:
        return path


def _hows(writers: Mapping[int, Mapping]) -> list[str]:
    return sorted({w["how"] for w in writers.values()})


def _site(writers: Mapping[int, Mapping]) -> str:
    sites = sorted({w["site"] for w in writers.values() if w.get("site")})
    return f", {sites[0]}" if sites else ""


def _by_rank(values: Mapping[int, object]) -> str:
    return ", ".join(f"rank {rank}: {value}" for rank, value in sorted(values.items()))


def _ranks(ranks: Sequence[int]) -> str:
    return ",".join(map(str, ranks))


def _times(count: int) -> str:
    return {1: "once", 2: "twice"}.get(count, f"{count} times")
