"""``mmgate tokens``: visual/audio token counts for images, videos, audio or bare sizes, side by side.

Inputs are media files (size and duration read from their headers, nothing decoded), PDF
documents (pages and text layer read with pypdf) or literals: ``1280x720`` (an image),
``1280x720:10s`` or ``1280x720:10s:30fps`` (a video), ``30s`` (audio).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmgate.errors import RequestError
from mmgate.request.view import Modality
from mmgate.tables import Column as TableColumn
from mmgate.tables import Table, add_format_argument, columns, emit
from mmgate.tokens.estimator import Estimator
from mmgate.tokens.families import FAMILIES, family_for_model, get_family
from mmgate.tokens.providers import OPENAI_MODELS, Provider, get_provider, hosted_rules
from mmgate.tokens.rules import Count, Family, UnknownNameError

DEFAULT_VIDEO_FPS = 24.0
WIDE_COLUMNS = 7  # more rules than this print one row per (input, rule)
_IMAGE = re.compile(r"^(\d+)[xX](\d+)$")
_VIDEO = re.compile(r"^(\d+)[xX](\d+):(\d+(?:\.\d+)?)s(?::(\d+(?:\.\d+)?)fps)?$")
_AUDIO = re.compile(r"^(\d+(?:\.\d+)?)s$")


@dataclass(frozen=True, slots=True)
class Input:
    label: str
    modality: Modality
    width: int | None = None
    height: int | None = None
    duration_s: float | None = None
    fps: float | None = None
    pages: int | None = None  # documents
    text_bytes: int = 0  # documents: UTF-8 bytes of the extracted text layer

    @property
    def text_tokens(self) -> int:
        """The text layer counted as mmgate counts text without a tokenizer (4 bytes a token)."""
        return -(-self.text_bytes // 4)

    @property
    def shape(self) -> str:
        if self.modality is Modality.DOCUMENT:
            return f"{self.pages} pages, {self.text_bytes:,} B of text"
        if self.modality is Modality.AUDIO:
            return f"{self.duration_s:g} s"
        size = f"{self.width}x{self.height}"
        if self.modality is Modality.VIDEO:
            return f"{size}, {self.duration_s:g} s @ {self.fps:g} fps"
        return size


def parse_input(text: str) -> Input:
    """A literal size/duration, or a media file whose header gives them."""
    if m := _IMAGE.match(text):
        return Input(text, Modality.IMAGE, int(m[1]), int(m[2]))
    if m := _VIDEO.match(text):
        fps = float(m[4]) if m[4] else DEFAULT_VIDEO_FPS
        return Input(text, Modality.VIDEO, int(m[1]), int(m[2]), float(m[3]), fps)
    if m := _AUDIO.match(text):
        return Input(text, Modality.AUDIO, duration_s=float(m[1]))
    path = Path(text)
    if not path.is_file():
        raise ValueError(
            f"{text!r} is neither a file nor a size; "
            "use WxH (image), WxH:SECONDSs[:FPSfps] (video) or SECONDSs (audio)"
        )
    return _probe_file(path)


def _probe_file(path: Path) -> Input:
    from mmgate.request.probe import AUDIO_FORMATS, IMAGE_FORMATS, probe_bytes, sniff

    data = path.read_bytes()
    if sniff(data[:64]) == "pdf":
        from mmgate.tokens.documents import read_pdf

        doc = read_pdf(data, name=str(path))
        return Input(str(path), Modality.DOCUMENT, pages=doc.pages, text_bytes=doc.text_bytes)
    result = probe_bytes(data)
    if result is None:
        raise ValueError(f"{path}: not a media file mmgate can read the header of")
    label = str(path)
    if result.format in AUDIO_FORMATS or (result.width is None and result.duration_s is not None):
        if not result.duration_s:
            raise ValueError(f"{path}: {result.format} header has no duration")
        return Input(label, Modality.AUDIO, duration_s=result.duration_s)
    if not result.width or not result.height:
        raise ValueError(f"{path}: {result.format} header has no dimensions")
    if result.format in IMAGE_FORMATS or not result.duration_s:
        return Input(label, Modality.IMAGE, result.width, result.height)
    return Input(
        label, Modality.VIDEO, result.width, result.height, result.duration_s, result.fps or DEFAULT_VIDEO_FPS
    )


@dataclass(frozen=True, slots=True)
class Column:
    """One rule to count with: a family, a hosted API or llm-d's default estimate."""

    name: str
    kind: str  # "family" | "provider" | "estimate"
    family: Family[Any] | None = None
    provider: Provider | None = None
    detail: str | None = None  # OpenAI image detail for provider columns

    def count(self, item: Input) -> Count | None:
        """The count, or None when this rule has nothing for the input's modality."""
        w, h, d, f = item.width, item.height, item.duration_s, item.fps
        if self.family is not None:
            fam = self.family
            if item.modality is Modality.IMAGE and fam.image is not None:
                return fam.count_image(w, h)  # type: ignore[arg-type]
            if item.modality is Modality.VIDEO and fam.video is not None:
                return fam.count_video(w, h, d, f)  # type: ignore[arg-type]
            if item.modality is Modality.AUDIO and fam.audio is not None:
                return fam.count_audio(d)  # type: ignore[arg-type]
            return None
        if item.modality is Modality.DOCUMENT:  # only hosted APIs with a documented page rule
            doc = self.provider.document if self.provider is not None else None
            return doc(item.pages or 1, item.text_tokens) if doc is not None else None
        if self.provider is not None:
            p = self.provider
            if item.modality is Modality.IMAGE:
                return p.image(w, h, self.detail)  # type: ignore[arg-type]
            if item.modality is Modality.VIDEO and p.video is not None:
                return p.video(w, h, d, f)  # type: ignore[arg-type]
            if item.modality is Modality.AUDIO and p.audio is not None:
                return p.audio(d)  # type: ignore[arg-type]
            return None
        est = Estimator()
        if item.modality is Modality.IMAGE:
            return est.image(w, h)
        if item.modality is Modality.VIDEO:
            return est.video(w, h, d, f)
        return est.audio(d)


def split_params(items: list[str]) -> list[tuple[str | None, str, str]]:
    """``KEY=VALUE`` or ``FAMILY.KEY=VALUE`` -> (family or None, key, value)."""
    out: list[tuple[str | None, str, str]] = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--param {item!r}: expected KEY=VALUE or FAMILY.KEY=VALUE")
        scope, dot, name = key.rpartition(".")
        out.append((scope if dot else None, name, value))
    return out


def _split(groups: list[str]) -> list[str]:
    return [n for group in groups for n in (x.strip() for x in group.split(",")) if n]


def resolve_models(models: list[str]) -> tuple[list[str], list[str]]:
    """``--model`` names as (family names, provider names): a served model id prices with its
    family (:func:`family_for_model`, what the gateway and the simulator use), a hosted model
    name (``gpt-4o``, ``claude-sonnet-4-5``) with its provider rule."""
    families: list[str] = []
    providers: list[str] = []
    for model in models:
        family = family_for_model(model)
        if family is not None:
            families.append(family)
            continue
        try:
            get_provider(model)
        except UnknownNameError:
            raise UnknownNameError(
                f"--model {model!r}: no model family or hosted API matches it; name the family with "
                f"--family (one of: {', '.join(FAMILIES)})"
            ) from None
        providers.append(model)
    return families, providers


def build_columns(
    families: list[str],
    providers: list[str],
    params: list[str],
    estimate: bool,
    detail: str | None = None,
    models: Sequence[str] = (),
) -> list[Column]:
    model_families, model_providers = resolve_models(_split(list(models)))
    names: list[str] = []
    for name in [*_split(families), *model_families]:
        names.extend(FAMILIES if name.lower() == "all" else [name])
    fams = list({f.name: f for f in (get_family(n) for n in names)}.values())
    provs = [get_provider(p) for p in [*_split(providers), *model_providers]]
    if not fams and not provs and not estimate:
        fams = [get_family("qwen3-vl")]
    overrides: dict[str, dict[str, str]] = {f.name: {} for f in fams}
    for scope, key, value in split_params(params):
        targets = [get_family(scope)] if scope else [f for f in fams if key in f.param_names()]
        if scope and targets[0].name not in overrides:
            raise ValueError(
                f"--param {scope}.{key}: family {targets[0].name!r} is not selected with --family"
            )
        if not targets:
            valid = sorted({p for f in fams for p in f.param_names()})
            raise UnknownNameError(
                f"--param {key}: no selected family has this parameter; valid: {', '.join(valid) or '(none)'}"
            )
        for fam in targets:
            overrides[fam.name][key] = value
    columns = [Column(f.name, "family", family=f.with_params(overrides[f.name])) for f in fams]
    columns += [Column(p.name, "provider", provider=p, detail=detail) for p in provs]
    if estimate:
        columns.append(Column("llm-d-estimate", "estimate"))
    return columns


@dataclass(frozen=True, slots=True)
class BadInput:
    """An input that could not be read (``12x``, a missing file): its row says why, the others
    still print."""

    label: str
    error: str

    @property
    def shape(self) -> str:
        return f"error: {self.error}"


def read_inputs(texts: Sequence[str]) -> list[Input | BadInput]:
    """Every input, each one read on its own: one bad one does not hide the others' counts."""
    out: list[Input | BadInput] = []
    for text in texts:
        try:
            out.append(parse_input(text))
        except (RequestError, ValueError) as exc:
            out.append(BadInput(text, str(exc)))
    return out


def count_all(inputs: Sequence[Input | BadInput], columns: list[Column]) -> list[dict[str, Any]]:
    """One record per (input, column) where the column has a rule for the input; a rule that
    refuses an input (``0x0``) gives a record with its ``error`` instead of ``tokens``."""
    rows: list[dict[str, Any]] = []
    for item in inputs:
        if isinstance(item, BadInput):
            rows.append({"input": item.label, "error": item.error})
            continue
        for col in columns:
            row: dict[str, Any] = {"input": item.label, "modality": item.modality.value}
            row["provider" if col.kind == "provider" else "family"] = col.name
            try:
                count = col.count(item)
            except (RequestError, ValueError) as exc:
                rows.append({**row, "error": str(exc)})
                continue
            if count is None:
                continue
            row.update(width=item.width, height=item.height)
            if item.modality is not Modality.IMAGE:
                row.update(duration_s=item.duration_s)
            if item.modality is Modality.VIDEO:
                row.update(fps=item.fps)
            if item.modality is Modality.DOCUMENT:
                row = {k: v for k, v in row.items() if k not in ("width", "height", "duration_s")}
                row.update(pages=item.pages, text_bytes=item.text_bytes)
            row.update(tokens=count.tokens, extra_tokens=count.extra)
            rows.append(row)
    return rows


def check_documents_priced(inputs: Sequence[Input | BadInput], rows: list[dict[str, Any]]) -> None:
    """A document no selected rule prices is a usage error, not an empty table."""
    priced = {r["input"] for r in rows}
    for item in inputs:
        if isinstance(item, Input) and item.modality is Modality.DOCUMENT and item.label not in priced:
            raise ValueError(
                f"{item.label}: documents are priced by hosted APIs that document a page rule; "
                "add --provider anthropic (model families here take no PDFs)"
            )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = (
        "Count the tokens an image, video or audio clip costs per model family or hosted API.\n\n"
        "INPUT is a media file (only its header is read) or a literal:\n"
        "  1280x720              an image of that size\n"
        "  1280x720:10s[:30fps]  a video (default 24 fps)\n"
        "  30s                   an audio clip\n"
        "  report.pdf            a PDF: pages and text layer (--provider anthropic)\n\n"
        "examples:\n"
        "  mmgate tokens 1920x1080 photo.png --family qwen3-vl,gemma4,llava-next\n"
        "  mmgate tokens 1280x720 --provider anthropic --provider openai:gpt-4o --estimate\n"
        "  mmgate tokens 1920x1080 --family qwen2.5-vl --param max_pixels=1003520\n"
        "  mmgate tokens 1280x720 --model Qwen/Qwen2.5-VL-7B-Instruct --model claude-sonnet-4-5\n"
        "  mmgate tokens --list"
    )
    parser.add_argument("inputs", nargs="*", metavar="INPUT", help="media file, WxH, WxH:Ns[:Ffps] or Ns")
    parser.add_argument(
        "--family",
        "-f",
        action="append",
        default=[],
        metavar="NAME[,NAME]",
        help="model family (repeatable, comma-separated, or 'all'); default qwen3-vl",
    )
    parser.add_argument(
        "--provider",
        "-p",
        action="append",
        default=[],
        metavar="NAME",
        help="hosted API: anthropic (or any claude-* model), gemini (or any gemini-* model), "
        f"openai:MODEL or a bare OpenAI model, dated snapshots included ({', '.join(OPENAI_MODELS)})",
    )
    parser.add_argument(
        "--model",
        "-m",
        action="append",
        default=[],
        metavar="ID",
        help="a served model id (Hugging Face, e.g. Qwen/Qwen2.5-VL-7B-Instruct: priced by its family, "
        "matched as the gateway does) or a hosted model name (gpt-4o, claude-sonnet-4-5); repeatable",
    )
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a family parameter (HF processor config names, e.g. max_pixels, max_soft_tokens); "
        "FAMILY.KEY=VALUE targets one family",
    )
    parser.add_argument(
        "--detail", choices=("low", "high", "auto"), help="OpenAI image detail for --provider openai:MODEL"
    )
    parser.add_argument("--estimate", action="store_true", help="add llm-d's default token-producer estimate")
    add_format_argument(parser)  # --json: one object per (input, family/provider)
    parser.add_argument(
        "--list",
        action="store_true",
        help="list the families (parameters, defaults) and the hosted API rules",
    )


def run(args: argparse.Namespace) -> int:
    try:
        if args.list:
            _print_families(args.format)
            return 0
        if not args.inputs:
            print("mmgate tokens: error: give at least one INPUT (or --list); see --help", file=sys.stderr)
            return 2
        rules = build_columns(
            args.family, args.provider, args.param, args.estimate, args.detail, models=args.model
        )
        inputs = read_inputs(args.inputs)
        rows = count_all(inputs, rules)
        check_documents_priced(inputs, rows)
    except (RequestError, ValueError) as exc:
        print(f"mmgate tokens: error: {exc}", file=sys.stderr)
        return 2
    emit([_table(inputs, rules, rows)], args.format, data=rows)
    failed = {row["input"]: row["error"] for row in rows if "error" in row}
    for label, error in failed.items():  # after the table, so the good rows are not lost
        print(f"mmgate tokens: error: {label}: {error}", file=sys.stderr)
    return 2 if failed else 0


def _cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "—"
    if "error" in row:
        return "error"
    extra = f" (+{row['extra_tokens']})" if row["extra_tokens"] else ""
    return f"{row['tokens']:,}{extra}"


TITLE = "tokens (+ placeholder tokens)"


def _table(inputs: Sequence[Input | BadInput], rules: list[Column], rows: list[dict[str, Any]]) -> Table:
    """One column per rule, or with many rules one row per (input, rule)."""
    by_key = {(r["input"], r.get("family") or r.get("provider")): r for r in rows}
    if len(rules) > WIDE_COLUMNS:
        long = Table(columns("input", "shape", "rule", "tokens", numeric=["tokens"]), title=TITLE)
        for item in inputs:
            if isinstance(item, BadInput):
                long.add(item.label, item.shape, "—", "—")
            for rule in rules:
                if (item.label, rule.name) in by_key:
                    long.add(item.label, item.shape, rule.name, _cell(by_key[(item.label, rule.name)]))
        return long
    names = [r.name for r in rules]
    wide = Table(columns("input", "shape", *names, numeric=names), title=TITLE)
    for i in inputs:
        wide.add(i.label, i.shape, *(_cell(by_key.get((i.label, name))) for name in names))
    return wide


def _print_families(fmt: str) -> None:
    import dataclasses

    records: list[dict[str, Any]] = [
        {
            "family": f.name,
            "modalities": list(f.modalities),
            "about": f.about,
            "params": dataclasses.asdict(f.params),
        }
        for f in FAMILIES.values()
    ]
    table = Table(
        (
            TableColumn("family"),
            TableColumn("prices"),
            TableColumn("reference", wrap=48),
            TableColumn("parameters (defaults)", wrap=56),
        ),
        title="families (mmgate tokens --family NAME; --param KEY=VALUE)",
    )
    for r in records:
        params = ", ".join(f"{k}={v}" for k, v in r["params"].items())
        table.add(r["family"], " ".join(r["modalities"]), r["about"], params)
    hosted = hosted_rules()
    apis = Table(
        (TableColumn("provider"), TableColumn("takes"), TableColumn("rule", wrap=72)),
        title="hosted APIs (mmgate tokens --provider NAME, or --model NAME)",
    )
    for h in hosted:
        apis.add(h["provider"], h["takes"], h["rule"])
    emit([table, apis], fmt, data={"families": records, "providers": hosted})
