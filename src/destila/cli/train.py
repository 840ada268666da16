"""`destila train`: placeholder until its issue lands."""


def register(subparsers) -> None:
    subparsers.add_parser("train", help="(not built yet)")
