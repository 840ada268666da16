"""`destila eval TEACHER --draft DRAFT --prompts P`: the draft measured in speculative decoding."""

from __future__ import annotations

import json

from destila.cli.fields import values_of
from destila.draft.spec import DraftEvalSpec
from destila.draft.table import print_draft_report
from destila.io import write_report_file

# eval's flags that --draft does not read: held-out metrics and tasks are measured by their own runs.
_OTHER_WORK = {"cache": "--cache", "data": "--data", "tasks": "--tasks", "teacher": "--teacher"}


def measure(args) -> int:
    # rich: only when the report is printed
    from rich.console import Console

    # destila.draft.measure imports torch: only when a draft is measured
    from destila.draft.measure import measure_draft

    others = [flag for name, flag in _OTHER_WORK.items() if getattr(args, name, None) is not None]
    if others:
        raise ValueError(f"eval: --draft measures generation only; {', '.join(others)} go in a run of their own")
    if len(args.models) != 1:
        raise ValueError(f"eval: --draft takes one MODEL, the teacher; found {len(args.models)}: "
                         f"{' '.join(args.models)}")
    spec = DraftEvalSpec(teacher=args.models[0], prompts=args.prompts, device=args.device,
                         seed=0 if args.seed is None else args.seed,
                         **values_of(args, DraftEvalSpec))
    report = measure_draft(spec)
    console = Console()
    print_draft_report(console, report)
    if args.json:
        write_report_file(args.json, json.dumps(report, indent=2, ensure_ascii=False))
        print(f"results written to {args.json}")
    for error in report["errors"]:
        console.print(f"[red]error:[/red] {error}", highlight=False)
    return 1 if report["errors"] else 0
