"""What locating a response's tokens in its text costs, where characters are split across tokens.

Every probe and every truth score maps each response token to its character span
(``oar.method.probes.token_char_spans``). Where the per-token pieces rebuild the decode this is one
pass; where a byte-level tokenizer has split a character across tokens (symbols such as € × π ≈,
CJK, emoji) the spans come from decoding prefixes. This times, for responses of each length, the
spans as the project finds them (decoding from the last whole character) against decoding every
prefix from the start, and checks that both give the same spans.

    .venv/bin/python perf/token_spans.py --lengths 256 1024 3072
"""

from __future__ import annotations

import argparse

from harness import add_out, add_repeats, markdown_table, median_seconds, write_table
from oar.method import probes
from oar.models.sources import load_packaged_tokenizer

TEXT = "So 3 € × 2 = 6 €, π ≈ 3.14; 中文数学 😀👍🏽 and 12 + 7 = 19. "


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", help="tokenizer folder (default: the packaged SmolLM2-135M's)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 3072], help="response tokens")
    parser.add_argument("--responses", type=int, default=8, help="responses a length")
    add_repeats(parser, 3)
    add_out(parser, "also write the table here (and its numbers as JSON beside it)")
    args = parser.parse_args()

    if args.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    else:
        tokenizer = load_packaged_tokenizer()
    rows, record = [], []
    for length in args.lengths:
        ids = tokenizer(TEXT * (length // 8 + args.responses), add_special_tokens=False)["input_ids"]
        # Each response starts at another offset, so a character is split at either end of some.
        responses = [ids[7 * r : 7 * r + length] for r in range(args.responses)]
        split = sum("".join(tokenizer.batch_decode([[i] for i in r], **probes.AS_WRITTEN))
                    != probes._decode(tokenizer, r)
                    for r in responses)
        spans = [probes.token_char_spans(tokenizer, r)[2] for r in responses]
        every = [probes._ends_from_every_prefix(tokenizer, r) for r in responses]
        if spans != every:
            raise SystemExit(f"spans differ from every prefix's decode at {length} tokens")
        now = median_seconds(lambda: [probes.token_char_spans(tokenizer, r) for r in responses], args.repeats)
        prefix = median_seconds(lambda: [probes._ends_from_every_prefix(tokenizer, r) for r in responses], args.repeats)
        rows.append([length, f"{split} of {len(responses)}", f"{now:.3f}", f"{prefix:.3f}", f"{prefix / now:.0f}x"])
        record.append({"tokens": length, "responses": len(responses), "split": split, "spans_s": now,
                       "every_prefix_s": prefix})
    table = markdown_table(["tokens", "responses with a split character", "spans s", "every prefix s", "ratio"],
                           rows, "rrrrr")
    print(table)
    if args.out:
        write_table(args.out, table, record)


if __name__ == "__main__":
    main()
