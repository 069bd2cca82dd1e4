"""``python -m oar.bench``: the token-credit benchmark's commands.

    python -m oar.bench credit --scorer ktae                       # one entry on the ground-truth track
    python -m oar.bench credit --scorer mypkg.scores:my_scorer      # a scorer of your own, by import path
    python -m oar.bench credit --baselines                         # chance's company: the standard rows
    python -m oar.bench credit --baselines --skip oar_p            # ... without the costly exact OAR-P
    python -m oar.bench plot --policy chain_f1                     # the leaderboard's and the per-step plots
    python -m oar.bench submit --scorer mypkg.scores:my_scorer     # a submission file of a row you ran
    python -m oar.bench verify submission.json                     # a maintainer reruns it and compares
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
# The rows every leaderboard carries beside chance: the controls, the trivial baselines, OAR's scorers and the truth.
# The trivial baselines are among them so that a method's row reads against what the policy's surprise and the
# grammar's spelling get without any credit assignment.
BASELINES = ("random", "position", "entropy", "surprisal", "last_step", "relations_and_results", "grad_norm", "oar_p",
             "oar_g", "truth")
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
    credit.add_argument("--skip", action="append", default=[], metavar="NAME",
                        help="leave this entry out (repeat for several), e.g. --skip oar_p with --baselines")
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
    plot = commands.add_parser("plot", help="draw a policy's leaderboard with intervals and its per-step scores")
    plot.add_argument("--policy", default="chain_f1", choices=POLICIES)
    plot.add_argument("--out", default="results/bench")
    submit = commands.add_parser("submit", help="write a submission file of an entry's row and its scores")
    submit.add_argument("--scorer", required=True, help="the entry, as it was run with credit --scorer")
    submit.add_argument("--policy", default="chain_f1", choices=POLICIES)
    submit.add_argument("--out", default="results/bench", help="where credit wrote the row")
    submit.add_argument("--to", help="the submission file (default submission-<policy>-<entry>.json here)")
    verify = commands.add_parser("verify", help="rerun a submission's scorer and compare its scores and numbers")
    verify.add_argument("file", help="a submission file (python -m oar.bench submit)")
    verify.add_argument("--threads", type=int, default=1)
    verify.add_argument("--cpu-kernels", default="avx2")
    learning = commands.add_parser("learning", help="the learning track's analysis of finished runs")
    learning.add_argument("--entries", nargs="+", required=True, help="the methods submitted together")
    learning.add_argument("--policy", default="chain_f1", choices=POLICIES)
    learning.add_argument("--seeds", type=int, nargs="+", help="the paired seeds (default: the config's)")
    learning.add_argument("--out", default="results/bench")
    learning.add_argument("--docs")
    return p


def credit(args: argparse.Namespace) -> None:
    from oar.bench import credit as track
    from oar.bench import leaderboard, response_set, scores_file
    from oar.models.frozen import mismatched_files, policy_dir
    from oar.models.loading import load_model

    entries = list(dict.fromkeys([*args.scorer, *(BASELINES if args.baselines else ())]))
    unknown = [name for name in args.skip if name not in entries]
    if unknown:
        raise SystemExit(f"python -m oar.bench credit: --skip {unknown[0]} is not among the entries to run "
                         f"({', '.join(entries) or 'none'})")
    entries = [e for e in entries if e not in args.skip]
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
        if scorer_spec(entry).reads("reference_model") and track.REFERENCE.get(entry) == "trained":
            if trained is None:
                trained, _ = load_model(response_set.trained_policy_dir(args.policy), dtype="float32", device="cpu")
            reference = trained
        kept: list = []
        try:
            record = track.run_entry(entry, args.policy, model, tokenizer, responses, seed=args.seed,
                                     reference_model=reference, log=lambda line: print(line, flush=True),
                                     on_scores=kept.append)
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
        s = r["step_level"]
        print(f"{entry}: first error located {s['first_error']['mean']:.3f} (chance {s['chance_first_error']:.3f}), "
              f"ProcessBench F1 {s['processbench_f1']:.3f} (erroneous {s['processbench_wrong']['mean']:.3f}, "
              f"correct {s['processbench_right']['mean']:.3f})"
              + (f", sign: erring relation negative {s['sign_wrong']['mean']:.3f}, right decisive positive "
                 f"{s['sign_right']['mean']:.3f}" if r.get("signed") else ""))
        if args.problems:
            continue
        path = leaderboard.write_entry_with_scores(args.out, "credit", args.policy, record["version"], entry, record,
                                                   kept[0], responses.rows)
        print(f"wrote {path} and {scores_file.path_for(path).name}")
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


def plot(args: argparse.Namespace) -> None:
    from oar.bench import leaderboard, plots, response_set

    entries = leaderboard.read_entries(args.out, "credit", args.policy, response_set.BENCHMARK_VERSION)
    if not entries:
        raise SystemExit(f"python -m oar.bench plot: no entries in "
                         f"{leaderboard.folder(args.out, 'credit', args.policy, response_set.BENCHMARK_VERSION)}")
    for path in plots.write_plots(entries, leaderboard.folder(args.out, "credit", args.policy,
                                                              response_set.BENCHMARK_VERSION)):
        print(f"wrote {path}")


def submit(args: argparse.Namespace) -> None:
    from oar.bench import response_set, submission

    path = submission.write_submission(args.out, args.policy, response_set.BENCHMARK_VERSION, args.scorer, args.to)
    print(f"wrote {path}: send it with the scorer's code; `python -m oar.bench verify {path}` reruns it")


def verify(args: argparse.Namespace) -> None:
    from oar.bench import submission

    ok, lines = submission.verify(args.file, threads=args.threads, log=lambda line: print(line, flush=True))
    print("\n".join(lines))
    if not ok:
        raise SystemExit(1)


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
    commands = {"credit": credit, "leaderboard": board, "responses": responses, "plot": plot, "submit": submit,
                "verify": verify}
    try:
        if args.command in commands:
            commands[args.command](args)
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
