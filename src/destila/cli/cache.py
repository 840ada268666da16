"""`destila cache`: placeholder until its issue lands."""


def register(subparsers) -> None:
    subparsers.add_parser("cache", help="(not built yet)")
