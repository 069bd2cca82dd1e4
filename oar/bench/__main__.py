"""``python -m oar.bench``: the token-credit benchmark's commands.

    python -m oar.bench credit --scorer ktae                       # one entry on the ground-truth track
    python -m oar.bench credit --scorer mypkg.scores:my_scorer      # a scorer of your own, by import path
    python -m oar.bench credit --baselines                         # chance's company: the standard rows
    python -m oar.bench leaderboard --docs docs/benchmark.md       # the tables again, into the docs
    python -m oar.bench responses --check                          # resample a response set, compare its hash
    python -m oar.bench responses --policy chain_d8 --ship --trained DIR   # a maintainer ships a new policy's set
    python -m oar.bench learning --entries ktae                    # the learning track's analysis (make bench-learning)

Every command says what it wrote. The CPU kernels are pinned to AVX2 where this CPU takes the pin (every
Intel CPU with AVX2 then computes the same numbers), else left unpinned and said so.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

POLICIES = ("chain_f1", "chain_d8")
# The rows every leaderboard carries beside chance: the controls, OAR's scorers and the truth scorer.
BASELINES = ("random", "position", "entropy", "grad_norm", "oar_p", "oar_g", "truth")
# Which second model an entry that reads one is given: the policy itself, or the policy trained from it by
# GRPO (PRIME's implicit reward model).
REFERENCE = {"prime": "trained"}
TRACEBACK_VARIABLE = "OAR_BENCH_TRACEBACK"  # set to 1: errors raise with their traceback (as --traceback)


def pin_kernels(level: str) -> str:
    """Pin the CPU kernels to ``level`` before torch runs (``none``: leave them); where this CPU cannot take
    the pin, run unpinned and say why. Returns the level in force."""
    from oar import cpu_kernels

    if level == "none":
        return "none"
    reason = cpu_kernels.unhonoured(level)
    if reason:
        print(f"CPU kernels left unpinned: {reason}; the numbers of model-reading entries may differ in the last "
              "digits from a pinned machine's", file=sys.stderr)
        return "none"
    os.environ[cpu_kernels.VARIABLE] = level
    cpu_kernels.apply()
    return level


def tracebacks(args: argparse.Namespace) -> bool:
    """Whether errors raise with their traceback (``--traceback`` or the variable) instead of one line."""
    return bool(getattr(args, "traceback", False)) or os.environ.get(TRACEBACK_VARIABLE) == "1"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m oar.bench", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    commands = p.add_subparsers(dest="command", required=True)
    credit = commands.add_parser("credit", help="score the response set of a frozen policy and rank the tokens")
    credit.add_argument("--scorer", action="append", default=[],
                        help="a registered scorer or an import path package.module:function (repeat for several)")
    credit.add_argument("--baselines", action="store_true", help=f"also the standard rows: {', '.join(BASELINES)}")
    credit.add_argument("--policy", default="chain_f1", choices=POLICIES, help="the frozen policy (default chain_f1)")
    credit.add_argument("--seed", type=int, default=0, help="the scorer calls' base seed")
    credit.add_argument("--threads", type=int, default=1, help="torch threads (the recorded numbers used 1)")
    credit.add_argument("--problems", type=int, help="only the first N problems: a quick check, not a leaderboard row")
    credit.add_argument("--out", default="results/bench", help="where the leaderboard files go")
    credit.add_argument("--docs", help="also write the table into this page between its leaderboard markers")
    credit.add_argument("--cpu-kernels", default="avx2", help="the pinned instruction set, or none (default avx2)")
    credit.add_argument("--traceback", action="store_true",
                        help="on an entry that stops, raise with the full traceback (debugging a scorer) instead of "
                             f"its one line (also: {TRACEBACK_VARIABLE}=1)")
    board = commands.add_parser("leaderboard", help="rebuild a policy's tables from its entries")
    board.add_argument("--policy", default="chain_f1", choices=POLICIES)
    board.add_argument("--out", default="results/bench")
    board.add_argument("--docs", help="write the tables into this page between its leaderboard markers")
    responses = commands.add_parser("responses", help="resample a frozen policy's response set")
    responses.add_argument("--policy", default="chain_f1", choices=POLICIES)
    responses.add_argument("--check", action="store_true", help="compare the resampled lines' sha256 with the shipped")
    responses.add_argument("--ship", action="store_true",
                           help="write the set into oar/bench/data and its index entry (a maintainer's step)")
    responses.add_argument("--trained", metavar="MODEL_DIR",
                           help="with --ship: also ship this GRPO-trained model folder as PRIME's implicit reward "
                                "model")
    responses.add_argument("--trained-from", help="with --trained: the run it is (recorded in the index)")
    responses.add_argument("--threads", type=int, default=1)
    responses.add_argument("--cpu-kernels", default="avx2")
    learning = commands.add_parser("learning", help="the learning track's analysis of finished runs")
    learning.add_argument("--entries", nargs="+", required=True, help="the methods submitted together")
    learning.add_argument("--policy", default="chain_f1", choices=POLICIES)
    learning.add_argument("--seeds", type=int, nargs="+", help="the paired seeds (default: the config's)")
    learning.add_argument("--out", default="results/bench")
    learning.add_argument("--docs")
    return p


def credit(args: argparse.Namespace) -> None:
    from oar.bench import credit as track
    from oar.bench import leaderboard, response_set
    from oar.models.frozen import mismatched_files, policy_dir
    from oar.models.loading import load_model

    entries = list(dict.fromkeys([*args.scorer, *(BASELINES if args.baselines else ())]))
    if not entries:
        raise SystemExit("python -m oar.bench credit: name a --scorer (or --baselines)")
    from oar.method.scorer_registry import ScorerError, scorer_spec

    for entry in entries:  # a name that is no scorer stops before any model loads
        try:
            scorer_spec(entry)
        except ScorerError as error:
            raise SystemExit(f"python -m oar.bench credit: {error}") from None
    bad = mismatched_files(args.policy)
    if bad:
        raise SystemExit(f"frozen policy {args.policy}: {'; '.join(bad)}")
    responses = response_set.load(args.policy)
    if args.problems:
        responses = responses.subset(args.problems)

    def policy_model():
        return load_model(policy_dir(args.policy), dtype="float32", device="cpu", threads=args.threads)

    model, tokenizer = policy_model()
    trained = None
    failed = []
    for entry in entries:
        reference = model
        if scorer_spec(entry).reads("reference_model") and REFERENCE.get(entry) == "trained":
            if trained is None:
                trained, _ = load_model(response_set.trained_policy_dir(args.policy), dtype="float32", device="cpu")
            reference = trained
        try:
            record = track.run_entry(entry, args.policy, model, tokenizer, responses, seed=args.seed,
                                     reference_model=reference, log=lambda line: print(line, flush=True))
        except track.BenchError as error:
            if tracebacks(args):
                raise
            # the entry stops; the others run on models loaded afresh, whatever it left behind, and the
            # command exits with one line per entry that stopped
            if len(entries) > 1:
                print(f"{entry}: stopped: {error}", flush=True)
            failed.append(str(error))
            model, tokenizer = policy_model()
            trained = None
            continue
        r = record["result"]
        print(f"{entry}: recall@10% {r['recall']['mean']:.3f}, average precision {r['average_precision']['mean']:.3f}, "
              f"erring outranks {100 * r['erring']['mean']:.0f}% ({r['ranked']} responses, {record['seconds']:.1f} s)")
        if args.problems:
            continue
        path = leaderboard.write_entry(args.out, "credit", args.policy, record["version"], entry, record)
        print(f"wrote {path}")
    if failed and len(failed) == len(entries):
        raise track.BenchError("\n".join(failed))
    if args.problems:
        print(f"--problems {args.problems}: a quick check on part of the set, no leaderboard row written")
        if failed:
            raise track.BenchError("\n".join(failed))
        return
    table, text = leaderboard.write_credit_table(args.out, args.policy, response_set.BENCHMARK_VERSION)
    print(text)
    print(f"wrote {table}")
    if args.docs:
        leaderboard.write_docs(args.docs, f"credit:{args.policy}", text)
        print(f"wrote the table into {args.docs}")
    if failed:
        raise track.BenchError("\n".join(failed))


def board(args: argparse.Namespace) -> None:
    from oar.bench import leaderboard, learning, response_set

    version = response_set.BENCHMARK_VERSION
    for track, write_table in (("credit", leaderboard.write_credit_table), ("learning", learning.write_learning_table)):
        if leaderboard.read_entries(args.out, track, args.policy, version):
            table, text = write_table(args.out, args.policy, version)
            print(text)
            print(f"wrote {table}")
            if args.docs:
                leaderboard.write_docs(args.docs, f"{track}:{args.policy}", text)


def responses(args: argparse.Namespace) -> None:
    from oar.bench import response_set
    from oar.models.frozen import mismatched_files, policy_dir

    bad = mismatched_files(args.policy)
    if bad:
        raise SystemExit(f"frozen policy {args.policy}: {'; '.join(bad)}")
    spec = response_set.spec_of(args.policy)
    rows = response_set.sample(spec, policy_dir(args.policy), threads=args.threads)
    digest = response_set.content_sha256(response_set.encode_lines(rows))
    print(f"resampled {args.policy}: {response_set.summary(rows)}; sha256 of its lines {digest}")
    if args.check:
        shipped = response_set.index().get(args.policy, {}).get("sha256")
        same = digest == shipped
        print(f"the shipped set's sha256 is {shipped}: {'the same bytes' if same else 'DIFFERENT'}")
        if not same:
            raise SystemExit(1)
    if args.ship:
        path = response_set.ship(args.policy, rows, threads=args.threads)
        print(f"shipped {path}")
        if args.trained:
            where = response_set.ship_trained(args.policy, args.trained, args.trained_from or args.trained)
            print(f"shipped {where}")


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if hasattr(args, "cpu_kernels"):
        args.cpu_kernels = pin_kernels(args.cpu_kernels)
    try:
        if args.command == "credit":
            credit(args)
        elif args.command == "leaderboard":
            board(args)
        elif args.command == "responses":
            responses(args)
        else:
            from oar.bench import learning

            learning.main(args)
    except ValueError as error:  # the benchmark's, the registry's, the frozen policies' and the config's errors
        if tracebacks(args):
            raise
        # one line per entry that stopped, each naming its scorer
        raise SystemExit("\n".join(f"python -m oar.bench {args.command}: {line}"
                                    for line in str(error).splitlines())) from None


if __name__ == "__main__":
    main()
