"""``fastgguf pull [NAME] [--list] [--force]``: download a catalogue model (default: the default model) if needed
and print its path; --list shows the catalogue."""

from __future__ import annotations


def register(subparsers) -> None:
    p = subparsers.add_parser("pull", help="download a catalogue model (default: the default model) and print its "
                                           "path; --list shows the catalogue")
    p.add_argument("name", nargs="?", default=None, help="catalogue name (see --list; default: smollm2-135m)")
    p.add_argument("--list", action="store_true", help="list the catalogue: names, sizes, licences, cached or not")
    p.add_argument("--force", action="store_true", help="download again even if it is cached")
    p.set_defaults(func=run)


def run(args) -> int:
    from fastgguf import hub
    if args.list:
        rows = hub.list_models()
        w = max([len("name")] + [len(r[0]) for r in rows])
        print(f"{'name':<{w}} {'size':>8}  {'licence':<20} {'cached':<6}  description")
        for name, size, licence, cached, desc in rows:
            star = " (default)" if name == hub.DEFAULT_NAME else ""
            print(f"{name:<{w}} {size / 1e6:>5.0f} MB  {licence:<20} {'yes' if cached else 'no':<6}  {desc}{star}")
        return 0
    print(hub.pull(force=args.force) if args.name is None else hub.pull(args.name, force=args.force))
    return 0
