"""A PEP 503 index over wheel and sdist files: `wheel-index.py SIMPLE-DIR FILE...` writes SIMPLE-DIR/<project>/
index.html linking each FILE by a path relative to it, so the index and its files can move together. A node's pip
reads it with `--index-url file://.../simple` and fetches nothing else (given only --find-links, pip still asks the
index for every package)."""

import html
import os
import pathlib
import re
import sys
import urllib.parse

out = pathlib.Path(sys.argv[1])
projects: dict[str, list[pathlib.Path]] = {}
for f in map(pathlib.Path, sys.argv[2:]):
    if not f.is_file():  # an unmatched shell glob
        continue
    if f.suffix == ".whl":
        name = f.name.split("-")[0]
    elif f.name.endswith((".tar.gz", ".zip")):
        name = f.name.rsplit("-", 1)[0]
    else:
        continue
    projects.setdefault(re.sub(r"[-_.]+", "-", name).lower(), []).append(f)
for project, files in projects.items():
    d = out / project
    d.mkdir(parents=True)
    links = "".join(f'<a href="{urllib.parse.quote(os.path.relpath(f, d))}">{html.escape(f.name)}</a>\n'
                    for f in sorted(files))
    (d / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")
print(f"{len(projects)} projects indexed in {out}")
