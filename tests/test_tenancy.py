from collector.records import TenantRule
from collector.tenancy import UNMAPPED, TenantMapper

RULES = [
    TenantRule("namespace", "ml-*", "ml/shared"),
    TenantRule("namespace", "ml-vision", "ml/vision"),
    TenantRule("label", "team=search", "web/search", rank=10),
    TenantRule("slurm_account", "physics", "sci/physics"),
]


def test_most_specific_then_rank() -> None:
    m = TenantMapper(RULES)
    assert m.resolve(namespace="ml-vision") == "ml/vision"  # exact beats prefix
    assert m.resolve(namespace="ml-audio") == "ml/shared"
    # a lower rank wins over a more specific pattern
    assert m.resolve(namespace="ml-vision", labels={"team": "search"}) == "web/search"
    assert m.resolve(slurm_account="physics") == "sci/physics"
    assert m.resolve(namespace="default") == UNMAPPED
    assert m.resolve(labels={"team": "searchx"}) == UNMAPPED


def test_split() -> None:
    assert TenantMapper.split("ml/vision") == ("ml", "vision")
    assert TenantMapper.split(UNMAPPED) == (UNMAPPED, "")
