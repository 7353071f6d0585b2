"""`push`: publish a pruned model folder to the Hugging Face Hub."""

from __future__ import annotations

from nirvana.cli.common import print_json


def register(sub) -> None:
    p = sub.add_parser("push", help="upload a pruned model folder to the Hugging Face Hub (private by default)")
    p.add_argument("--model", required=True, help="folder written by `prune --out` (or its model/ subfolder)")
    p.add_argument("--repo-id", required=True, help="NAMESPACE/NAME on the Hub, e.g. alice/smollm2-135m-nirvana-50")
    visibility = p.add_mutually_exclusive_group()
    visibility.add_argument("--private", dest="private", action="store_true", default=True, help="(default)")
    visibility.add_argument("--public", dest="private", action="store_false", help="make the repository public")
    p.add_argument("--dry-run", action="store_true", help="list what would be uploaded; needs no token or network")
    p.add_argument("--message", default=None, help="commit message")
    p.set_defaults(func=cmd_push)


def cmd_push(args) -> int:
    from nirvana.export.hub import push

    result = push(args.model, args.repo_id, private=args.private, dry_run=args.dry_run, commit_message=args.message)
    print_json(result)
    return 0
