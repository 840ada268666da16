"""`destila student`: placeholder until its issue lands."""


def register(subparsers) -> None:
    subparsers.add_parser("student", help="(not built yet)")
