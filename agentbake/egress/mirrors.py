"""Mirror routes the proxy serves itself, so HTTPS package indexes are cached without TLS interception.

    /pypi/simple/<project>/   PyPI's JSON simple API (PEP 691), its file links pointed at /pypi/files/...
    /pypi/files/<path>        files.pythonhosted.org, cached when the index gave the file's sha256
    /npm/<name>               an npm packument, its tarball links pointed at /npm/.../-/<file>.tgz
    /npm/<name>/-/<file>.tgz  a tarball, cached when the packument gave its `dist.integrity`
    /npm/<anything else>      passed through to the registry uncached (audit, search)

The cache holds the upstream's bytes verbatim; links are rewritten per answer. A file is cached only against a
digest an upstream index published (`Digests`).
"""

from __future__ import annotations

import html
import json
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from agentbake.egress.cache import Expected
from agentbake.egress.config import EgressConfig
from agentbake.egress.http1 import Headers, HttpError, header
from agentbake.egress.rules import Rule, plain_path
from agentbake.egress.upstream import Target, parse_url

PYPI_JSON = "application/vnd.pypi.simple.v1+json"
NPM_CORGI = "application/vnd.npm.install-v1+json"
_PROJECT = re.compile(r"^/pypi/simple/([A-Za-z0-9._-]+)/?$")
_NPM_NAME = r"(?:@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*"
_NPM_PACKUMENT = re.compile(rf"^/npm/({_NPM_NAME})$")
_NPM_TARBALL = re.compile(rf"^/npm/({_NPM_NAME})/-/([A-Za-z0-9][A-Za-z0-9._~-]*\.tgz)$")
_HOST = re.compile(r"^(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?$")

Render = Callable[[bytes], tuple[bytes, str]]


class Digests:
    """Upstream URL -> the digest its index published; bounded (oldest forgotten first)."""

    def __init__(self, max_entries: int = 200_000) -> None:
        self._known: OrderedDict[str, Expected] = OrderedDict()
        self._max = max_entries

    def add(self, url: str, expected: Expected | None) -> None:
        if expected is None:
            return
        self._known[url] = expected
        self._known.move_to_end(url)
        while len(self._known) > self._max:
            self._known.popitem(last=False)

    def get(self, url: str) -> Expected | None:
        return self._known.get(url)


@dataclass(frozen=True)
class MirrorFetch:
    """What a mirror request needs: upstream, cache key and rule (None: uncached), Accept header, the answer's rewrite,
    and the hosts the policy must allow."""

    upstream: Target
    key: str | None
    rule: Rule | None
    accept: str | None
    render: Render | None
    hosts: tuple[str, ...]


def normalize_project(name: str) -> str:
    """PEP 503's normalized project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


class Mirrors:
    def __init__(self, config: EgressConfig, digests: Digests) -> None:
        self.index = parse_url(config.pypi_index.rstrip("/"), schemes=("http", "https"))
        self.files = parse_url(config.pypi_files.rstrip("/"), schemes=("http", "https"))
        self.npm = parse_url(config.npm_registry.rstrip("/"), schemes=("http", "https"))
        self.ttl = config.index_ttl_s
        self.digests = digests

    @staticmethod
    def handles(path: str) -> bool:
        return path.startswith(("/pypi/", "/npm/"))

    def route(self, method: str, path: str, headers: Headers) -> MirrorFetch:
        """The fetch behind a mirror path; HttpError 404/405 for what no route serves."""
        if path.startswith("/pypi/"):
            if method not in ("GET", "HEAD"):
                raise HttpError(405, "the PyPI mirror serves GET and HEAD only")
            return self._pypi(path, header(headers, "accept") or "")
        return self._npm(method, path, headers)

    def _pypi(self, path: str, accept: str) -> MirrorFetch:
        hosts = (self.index.host, self.files.host)
        if match := _PROJECT.match(path):
            upstream = _under(self.index, f"/{normalize_project(match.group(1))}/")
            want_json = PYPI_JSON in accept
            return MirrorFetch(
                upstream, f"pypi-json {upstream.url}", Rule(self.ttl), PYPI_JSON, self._pypi_render(want_json), hosts
            )
        if path.startswith("/pypi/files/") and plain_path(path):
            upstream = _under(self.files, path.removeprefix("/pypi/files"))
            expected = self.digests.get(upstream.url)
            key = f"GET {upstream.url}" if expected is not None else None
            return MirrorFetch(upstream, key, Rule(None, expected) if key else None, None, None, hosts)
        raise HttpError(404, f"no PyPI mirror route for {path[:200]!r}: use /pypi/simple/<project>/")

    def _pypi_render(self, want_json: bool) -> Render:
        def render(raw: bytes) -> tuple[bytes, str]:
            page = _json_object(raw, "PyPI")
            files = []
            for item in page.get("files", []):
                if not isinstance(item, dict) or not isinstance(item.get("url"), str):
                    continue
                item = dict(item)
                item["url"] = self._pypi_link(item["url"], item.get("hashes"))
                for meta in ("core-metadata", "dist-info-metadata"):
                    if isinstance(item.get(meta), dict) and item["url"].startswith("/pypi/files/"):
                        self.digests.add(_upstream_of(self.files, item["url"], ".metadata"), _sha256(item[meta]))
                files.append(item)
            page["files"] = files
            if want_json:
                return json.dumps(page).encode(), PYPI_JSON
            return _simple_html(str(page.get("name", "")), files).encode(), "text/html; charset=utf-8"

        return render

    def _pypi_link(self, url: str, hashes: object) -> str:
        prefix = self.files.url.rstrip("/")
        parts = urlsplit(url)
        if not url.startswith(prefix + "/") or parts.query or not plain_path(parts.path):
            return url  # a file elsewhere: the client fetches it through the proxy like any other host
        self.digests.add(url.split("#", 1)[0], _sha256(hashes))
        return "/pypi/files" + url[len(prefix) :]

    def _npm(self, method: str, path: str, headers: Headers) -> MirrorFetch:
        hosts = (self.npm.host,)
        name_path = re.sub("%2[fF]", "/", path, count=1) if path.startswith("/npm/@") else path
        if method in ("GET", "HEAD") and (match := _NPM_PACKUMENT.match(name_path)):
            name = match.group(1)
            corgi = NPM_CORGI in (header(headers, "accept") or "")
            accept = NPM_CORGI if corgi else "application/json"
            upstream = _under(self.npm, "/" + name.replace("/", "%2f"))
            host = header(headers, "host") or ""
            if not _HOST.match(host):
                raise HttpError(400, "the npm mirror needs a plain Host header (host:port)")
            return MirrorFetch(
                upstream, f"npm {accept} {upstream.url}", Rule(self.ttl), accept, self._npm_render(host), hosts
            )
        if method in ("GET", "HEAD") and (match := _NPM_TARBALL.match(name_path)):
            upstream = _under(self.npm, f"/{match.group(1)}/-/{match.group(2)}")
            expected = self.digests.get(upstream.url)
            key = f"GET {upstream.url}" if expected is not None else None
            return MirrorFetch(upstream, key, Rule(None, expected) if key else None, None, None, hosts)
        return MirrorFetch(_under(self.npm, path.removeprefix("/npm")), None, None, None, None, hosts)

    def _npm_render(self, host: str) -> Render:
        prefix = self.npm.url.rstrip("/") + "/"

        def render(raw: bytes) -> tuple[bytes, str]:
            document = _json_object(raw, "npm")
            versions = document.get("versions")
            for version in versions.values() if isinstance(versions, dict) else ():
                dist = version.get("dist") if isinstance(version, dict) else None
                tarball = dist.get("tarball") if isinstance(dist, dict) else None
                if not isinstance(tarball, str) or not tarball.startswith(prefix):
                    continue
                path = "/" + tarball[len(prefix) :]
                if not _NPM_TARBALL.match("/npm" + path):
                    continue
                self.digests.add(tarball, _npm_digest(dist))
                dist["tarball"] = f"http://{host}/npm{path}"
            return json.dumps(document).encode(), "application/json"

        return render


def _under(base: Target, path: str) -> Target:
    return Target(base.scheme, base.host, base.port, base.path.rstrip("/") + path)


def _upstream_of(files: Target, link: str, suffix: str) -> str:
    return files.url.rstrip("/") + link.removeprefix("/pypi/files") + suffix


def _sha256(hashes: object) -> Expected | None:
    value = hashes.get("sha256") if isinstance(hashes, dict) else None
    return Expected.from_hex("sha256", value) if isinstance(value, str) else None


def _npm_digest(dist: dict[str, Any]) -> Expected | None:
    integrity, shasum = dist.get("integrity"), dist.get("shasum")
    if isinstance(integrity, str) and (found := Expected.from_sri(integrity)) is not None:
        return found
    return Expected.from_hex("sha1", shasum) if isinstance(shasum, str) else None


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        document = json.loads(raw)
    except ValueError as exc:
        raise HttpError(502, f"the {what} upstream sent an index that is not JSON") from exc
    if not isinstance(document, dict):
        raise HttpError(502, f"the {what} upstream sent an index that is not a JSON object")
    return document


def _simple_html(name: str, files: list[dict[str, Any]]) -> str:
    """PEP 503's HTML form of a JSON project page, for clients that do not ask for JSON."""
    links = []
    for item in files:
        href = item["url"]
        if (digest := _sha256(item.get("hashes"))) is not None:
            href += f"#sha256={digest.digest.hex()}"
        attributes = [f'href="{html.escape(href)}"']
        if isinstance(item.get("requires-python"), str):
            attributes.append(f'data-requires-python="{html.escape(item["requires-python"])}"')
        if item.get("yanked"):
            reason = item["yanked"] if isinstance(item["yanked"], str) else ""
            attributes.append(f'data-yanked="{html.escape(reason)}"')
        if (meta := _sha256(item.get("core-metadata"))) is not None:
            attributes.append(f'data-core-metadata="sha256={meta.digest.hex()}"')
        links.append(f"<a {' '.join(attributes)}>{html.escape(str(item.get('filename', '')))}</a><br/>")
    body = "\n".join(links)
    title = html.escape(name)
    return f"<!DOCTYPE html>\n<html><head><title>Links for {title}</title></head><body>\n{body}\n</body></html>\n"
