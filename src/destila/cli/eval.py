"""`destila eval`: placeholder until its issue lands."""


def register(subparsers) -> None:
    subparsers.add_parser("eval", help="(not built yet)")
