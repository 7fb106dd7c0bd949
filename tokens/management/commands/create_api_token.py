from django.core.management.base import BaseCommand, CommandError

from tokens.models import SCOPES
from tokens.services import token_create


class Command(BaseCommand):
    help = "Create an API token; prints the token alone on the last line of stdout."

    def add_arguments(self, parser):
        parser.add_argument("--name", default="agent", help="a label to recognise the token by")
        parser.add_argument(
            "--scope",
            action="append",
            choices=SCOPES,
            dest="scopes",
            help="tools (the agent tool API, default) or host (the embedded host API); repeatable",
        )

    def handle(self, *args, name, scopes, **options):
        try:
            token, raw = token_create(name=name, scopes=scopes or ["tools"])
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"Created token {token.name!r} with scopes {', '.join(token.scopes)}.")
        self.stdout.write(raw)
