"""`destila bench`: placeholder until its issue lands."""


def register(subparsers) -> None:
    subparsers.add_parser("bench", help="(not built yet)")
