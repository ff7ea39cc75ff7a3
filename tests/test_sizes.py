from engine.units import format_size


def test_format_size_picks_the_unit_by_magnitude() -> None:
    assert format_size(2_346_000_000) == "2.35 GB"
    assert format_size(456_400_000) == "456 MB"
    assert format_size(12_340_000) == "12.3 MB"
    assert format_size(125_000) == "0.1 MB"
    assert format_size(12_600) == "0.013 MB"
    assert format_size(0) == "0.000 MB"
