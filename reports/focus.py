"""A month's chargeback as a FOCUS 1.2 cost-and-usage CSV (the FinOps Open Cost and Usage
Specification), so that finance tools read GPU charges beside cloud bills.

Each ledger line (``group_by="tenant,user,gpu_model"`` or any other grouping) becomes:

* a **usage row** (ChargeCategory ``Usage``): the GPU-hours it held as PricingQuantity and
  ConsumedQuantity in ``GPU-Hours``, and its direct cost (those hours at the price book's
  prices) as BilledCost; the GPU figures ride along in ``x_`` columns;
* an **unallocated-share row** (ChargeCategory ``Adjustment``) beside it, when the idle policy
  gave the line a share of the capacity nobody held, with ChargeDescription "Share of
  unallocated GPU capacity".

Why the share is a row of its own rather than folded into the usage row: FOCUS ties a
``Usage`` row's cost to a metered quantity (PricingQuantity and ConsumedQuantity must be set),
and the share is not metered: the policy allocates it by weight, so no honest quantity or unit
price exists for it. Kept apart, a usage row's BilledCost stays "hours × price" (its unit
economics intact), and a reader sees, filters (ChargeCategory, ``x_CostKind``) or re-allocates
the idle cost without undoing a sum. ``Adjustment`` is the category FOCUS 1.2 leaves for a
charge that is neither usage, purchase, tax nor credit, and its quantities may be null.

Under the ``none`` policy (or with nobody to share it with) the capacity nobody held is one
row charged to no tenant (no SubAccount), ``x_CostKind`` ``unallocated``. Every amount is
the ledger's own cents, never re-rounded, so BilledCost adds up to the ledger's total cost to
the cent. The same ledger writes the same bytes: rows in the ledger's order, fixed columns,
sorted tag keys, ``\\n`` line ends.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import io
import json
import math
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path

from gpuledger_errors import InputError
from warehouse.ledger import Ledger, LedgerRow, grouping_keys

FOCUS_VERSION = "1.2"

#: The FOCUS 1.2 columns written, in the order written (FOCUS columns first, then ``x_``).
FOCUS_COLUMNS = (
    "BilledCost",
    "BillingAccountId",
    "BillingAccountName",
    "BillingCurrency",
    "BillingPeriodEnd",
    "BillingPeriodStart",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargeFrequency",
    "ChargePeriodEnd",
    "ChargePeriodStart",
    "CommitmentDiscountStatus",
    "ConsumedQuantity",
    "ConsumedUnit",
    "ContractedCost",
    "EffectiveCost",
    "InvoiceId",
    "InvoiceIssuerName",
    "ListCost",
    "PricingCategory",
    "PricingQuantity",
    "PricingUnit",
    "ProviderName",
    "PublisherName",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "ServiceCategory",
    "ServiceName",
    "ServiceSubcategory",
    "SubAccountId",
    "SubAccountName",
    "SubAccountType",
    "Tags",
)
#: Custom columns: hours are GPU-hours, efficiency is used ÷ allocated (a 0-1 ratio).
CUSTOM_COLUMNS = (
    "x_AllocatedGpuHours",
    "x_CostKind",
    "x_GpuEfficiency",
    "x_GpuModel",
    "x_IdleGpuHours",
    "x_IdlePolicy",
    "x_UnallocatedGpuHours",
    "x_UnmeasuredGpuHours",
    "x_UnpricedGpuHours",
    "x_UsedGpuHours",
)
COLUMNS = FOCUS_COLUMNS + CUSTOM_COLUMNS

#: What the export says of its provider, as the FOCUS validator's applicability criteria: a
#: named billing account, tenants as sub-accounts of two kinds (org, org/project), tags,
#: measured usage of typed resources (GPUs). Not claimed: public or negotiated unit prices
#: (a line mixes prices), commitments, reservations, regions, zones, several currencies.
APPLICABILITY = (
    "ACCOUNT_NAMING_SUPPORTED",
    "BILLING_BASED_ON_PROVISIONED_RESOURCES_SUPPORTED",
    "MULTIPLE_SUB_ACCOUNT_TYPES_SUPPORTED",
    "RESOURCE_TYPE_ASSIGNMENT_SUPPORTED",
    "SUB_ACCOUNT_SUPPORTED",
    "TAGGING_SUPPORTED",
    "USAGE_MEASUREMENT_SUPPORTED",
)

GPU_HOURS = "GPU-Hours"  # FOCUS unit format "<unit>-<plural time unit>"
SHARE_DESCRIPTION = "Share of unallocated GPU capacity"
UNALLOCATED_DESCRIPTION = "Unallocated GPU capacity, charged to no tenant"
_NONE = "(none)"  # the ledger's key for an unset grouping value


@dataclasses.dataclass(frozen=True)
class FocusAccount:
    """Who bills whom in the export: the provider of the GPUs (and, unless named apart, their
    publisher and the issuer of the statement), the billing account the charges belong to (a
    cluster, or the company), and the service name. ``tag_prefix`` starts every tag key, since
    FOCUS wants provider-defined keys prefixed; ``invoice_id`` is set only when an invoice
    (or a provisional one) carries these charges."""

    provider_name: str
    billing_account_id: str
    billing_account_name: str
    publisher_name: str | None = None
    invoice_issuer_name: str | None = None
    service_name: str = "GPU cluster"
    tag_prefix: str = "gpuledger/"
    invoice_id: str | None = None

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name != "tag_prefix" and value is not None and not str(value).strip():
                raise InputError(
                    f"FOCUS {field.name} {value!r} is blank: give it a name, or leave it out "
                    "where it may be left out"
                )

    @property
    def publisher(self) -> str:
        return self.publisher_name or self.provider_name

    @property
    def invoice_issuer(self) -> str:
        return self.invoice_issuer_name or self.provider_name


Row = dict[str, str | None]


def write_focus(path: Path | str, ledger: Ledger, *, account: FocusAccount) -> int:
    """Write ``ledger`` (one calendar month) as a FOCUS 1.2 CSV at ``path``; returns the
    number of charge rows."""
    rows = focus_rows(ledger, account=account)
    Path(path).write_bytes(_csv(rows))
    return len(rows)


def render_focus(ledger: Ledger, *, account: FocusAccount) -> bytes:
    """``ledger`` (one calendar month) as the bytes of a FOCUS 1.2 CSV."""
    return _csv(focus_rows(ledger, account=account))


def _csv(rows: Sequence[Row]) -> bytes:
    """A null is an empty, unquoted field, as FOCUS CSVs carry it."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    writer.writerows([row.get(c) or "" for c in COLUMNS] for row in rows)
    return out.getvalue().encode("utf-8")


def focus_rows(ledger: Ledger, *, account: FocusAccount) -> list[Row]:
    """The export's rows: per ledger line its usage row and its unallocated share (when it
    has one), then the capacity nobody carries (when there is any)."""
    common = _common(ledger, account)
    keys = grouping_keys(ledger.group_by)
    rows: list[Row] = []
    for line in ledger.rows:
        attributes = _attributes(keys, line)
        rows.append({**common, **_usage(line, attributes, account)})
        if line.shared_cost:
            rows.append({**common, **_share(line, attributes, account, ledger)})
    unshared = ledger.unallocated.cost if ledger.unallocated else ledger.totals.unshared_cost
    if ledger.unallocated is not None or unshared:
        rows.append({**common, **_unallocated(ledger, unshared)})
    return rows


def _common(ledger: Ledger, account: FocusAccount) -> Row:
    """What every row of the month has in common: account, period, service, currency."""
    start, end = _billing_period(ledger)
    return {
        "BillingAccountId": account.billing_account_id,
        "BillingAccountName": account.billing_account_name,
        "BillingCurrency": ledger.currency,
        "BillingPeriodStart": _instant(start),
        "BillingPeriodEnd": _instant(end),
        "ChargeClass": None,  # never a correction of an invoiced month
        "ChargePeriodStart": _instant(start),
        "ChargePeriodEnd": _instant(_charged_until(ledger)),
        # no commitment discounts: null, but present, as the ConsumedQuantity rules test it
        "CommitmentDiscountStatus": None,
        "InvoiceId": account.invoice_id,
        "InvoiceIssuerName": account.invoice_issuer,
        "ProviderName": account.provider_name,
        "PublisherName": account.publisher,
        "ServiceCategory": "Compute",
        "ServiceSubcategory": "Other (Compute)",  # GPU time is none of VMs, containers…
        "ServiceName": account.service_name,
        "x_IdlePolicy": ledger.idle_policy.value,
    }


def _usage(line: LedgerRow, attributes: Mapping[str, str], account: FocusAccount) -> Row:
    hours = _decimal(line.allocated_gpu_hours)
    return {
        **_owner(attributes, account),
        **_costs(line.direct_cost),
        "ChargeCategory": "Usage",
        "ChargeDescription": "GPU-hours allocated" + _of(attributes),
        "ChargeFrequency": "Usage-Based",
        "ConsumedQuantity": hours,
        "ConsumedUnit": GPU_HOURS,
        "PricingCategory": "Standard",  # the price book's rate, no commitment or spot price
        "PricingQuantity": hours,
        "PricingUnit": GPU_HOURS,
        "x_AllocatedGpuHours": hours,
        "x_CostKind": "usage",
        "x_GpuEfficiency": _decimal(line.efficiency),
        "x_IdleGpuHours": _decimal(line.idle_gpu_hours),
        "x_UnmeasuredGpuHours": _decimal(line.unmeasured_gpu_hours),
        "x_UnpricedGpuHours": _decimal(line.unpriced_gpu_hours),
        "x_UsedGpuHours": _decimal(line.used_gpu_hours),
    }


def _share(
    line: LedgerRow, attributes: Mapping[str, str], account: FocusAccount, ledger: Ledger
) -> Row:
    return {
        **_owner(attributes, account),
        **_costs(line.shared_cost),
        "ChargeCategory": "Adjustment",
        "ChargeDescription": f"{SHARE_DESCRIPTION} ({ledger.idle_policy.value} policy)"
        + _of(attributes),
        "ChargeFrequency": "Recurring",  # the fleet's capacity, whoever holds it
        "x_CostKind": "unallocated-share",
    }


def _unallocated(ledger: Ledger, cost: Decimal) -> Row:
    hours = (
        ledger.unallocated.gpu_hours
        if ledger.unallocated is not None
        else ledger.totals.unallocated_gpu_hours
    )
    return {
        **_costs(cost),
        "ChargeCategory": "Adjustment",
        "ChargeDescription": f"{UNALLOCATED_DESCRIPTION} ({ledger.idle_policy.value} policy)",
        "ChargeFrequency": "Recurring",
        "x_CostKind": "unallocated",
        "x_UnallocatedGpuHours": _decimal(hours),
    }


def _costs(amount: Decimal) -> Row:
    """The four FOCUS costs of an amount: the price book is both list and contract, and
    nothing is discounted or amortised, so they are the same cents."""
    money = format(amount, "f")
    return dict.fromkeys(("BilledCost", "EffectiveCost", "ContractedCost", "ListCost"), money)


def _attributes(keys: Sequence[str], line: LedgerRow) -> dict[str, str]:
    """The line's grouping values by name (an unset one left out), the tenant "org/project"
    also split into org and project."""
    values = line.parts or (line.key,)
    named = {k: v for k, v in zip(keys, values, strict=True) if v and v != _NONE}
    if "tenant" in named:
        org, _, project = named["tenant"].partition("/")
        named.setdefault("org", org)
        if project:
            named.setdefault("project", project)
    return named


def _owner(attributes: Mapping[str, str], account: FocusAccount) -> Row:
    """The sub-account (the tenant) and the resource (the GPU model's GPUs) a line is of,
    and its tags."""
    tenant = attributes.get("tenant")
    if tenant is None and "org" in attributes:
        project = attributes.get("project")
        tenant = f"{attributes['org']}/{project}" if project else attributes["org"]
    model = attributes.get("gpu_model")
    tags = {f"{account.tag_prefix}{k}": v for k, v in attributes.items() if k != "tenant"}
    return {
        "SubAccountId": tenant,
        "SubAccountName": tenant,
        "SubAccountType": None if tenant is None else "Project" if "/" in tenant else "Org",
        "ResourceId": None if model is None else f"{account.billing_account_id}/gpus/{model}",
        "ResourceName": None if model is None else f"{model} GPUs",
        "ResourceType": None if model is None else "GPU",
        "Tags": json.dumps(tags, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        if tags
        else None,
        "x_GpuModel": model,
    }


def _of(attributes: Mapping[str, str]) -> str:
    """ ", tenant a/b, user u, gpu_model m": what a line is, for ChargeDescription."""
    shown = {k: v for k, v in attributes.items() if k not in ("org", "project")}
    return "".join(f", {k} {v}" for k, v in shown.items())


def _billing_period(ledger: Ledger) -> tuple[dt.datetime, dt.datetime]:
    """The calendar month the ledger covers; a window that is not one month is refused,
    since a FOCUS billing period is the month the charges are billed in."""
    start, end = ledger.window.start.astimezone(dt.UTC), ledger.window.end.astimezone(dt.UTC)
    month_end = (start.replace(day=28) + dt.timedelta(days=4)).replace(day=1)
    if start != start.replace(day=1, hour=0, minute=0, second=0, microsecond=0) or (
        end != month_end
    ):
        raise InputError(
            f"the FOCUS export covers one calendar month, and the ledger's window is "
            f"{ledger.window.first_day} to {ledger.window.last_day}: compute the ledger from "
            "a month's first day to its last"
        )
    return start, end


def _charged_until(ledger: Ledger) -> dt.datetime:
    """The charges' exclusive end: the month's end, or where the clock cut a running month,
    rounded up to the whole second FOCUS instants carry."""
    until = ledger.window.until(ledger.computed_until.astimezone(dt.UTC))
    if until.microsecond:
        until = until.replace(microsecond=0) + dt.timedelta(seconds=1)
    return min(until, ledger.window.end.astimezone(dt.UTC))


def _instant(moment: dt.datetime) -> str:
    """FOCUS's date/time format: ISO 8601 in UTC, to the second, with a Z."""
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _decimal(value: float | None, places: int = 6) -> str | None:
    """A plain decimal string (no exponent, no trailing zeros), None kept as a null."""
    if value is None or not math.isfinite(value):
        return None
    text = f"{round(value, places) + 0.0:.{places}f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text
