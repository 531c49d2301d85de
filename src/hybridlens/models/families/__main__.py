"""Print the table of supported families, or rewrite it between the markers of a markdown file."""

import argparse
import re
from pathlib import Path

from hybridlens.models.families import family_table

BEGIN, END = (
    "<!-- families: written by python -m hybridlens.models.families --write README.md -->",
    "<!-- /families -->",
)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m hybridlens.models.families", description=__doc__)
    parser.add_argument("--write", metavar="FILE", help="replace the table between the family markers of FILE")
    args = parser.parse_args(argv)
    if args.write is None:
        print(family_table(), end="")
        return
    path = Path(args.write)
    text = path.read_text()
    block = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if not block.search(text):
        parser.error(f"{path}: no family markers; put {BEGIN} and {END} where the table goes")
    path.write_text(block.sub(lambda _: f"{BEGIN}\n{family_table()}{END}", text))


if __name__ == "__main__":
    main()
