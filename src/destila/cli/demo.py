"""`destila demo`: placeholder until its issue lands."""


def register(subparsers) -> None:
    subparsers.add_parser("demo", help="(not built yet)")
