"""Review finding (streams1000, allocator.freeze_startup_objects called by cli.serve right after AguiApp).

``gc.freeze()`` moves every object alive at that moment into the permanent generation, which no later
collection walks.  ``AguiApp`` starts the start-up take-over scan on its own thread (``RunManager``), so a
run the scan adopts while ``freeze_startup_objects`` collects is frozen with the "start-up objects": its
graph (projector, worker, channel, a cycle) is then never freed after the run ends and is summarised.
(Checked by hand: an adopted run's projector outlives its summary and ``gc.collect()`` once ``gc.freeze()``
ran while it was live, and is freed without the freeze.)
"""
import pytest

from iaccode_agui import allocator, cli

freeze = getattr(allocator, "freeze_startup_objects", None)


@pytest.mark.skipif(freeze is None, reason="allocator.freeze_startup_objects not on this branch")
def test_the_cli_freezes_before_the_app_can_start_adopting_runs(tmp_path, monkeypatch):
    """REVIEW DEFECT: ``cli.serve`` freezes after ``AguiApp(settings)``, whose manager has already started
    the take-over scan's thread; freezing first leaves nothing of the scan in the permanent generation."""
    import iaccode_agui.app as app_module

    order = []

    class App:
        def __init__(self, settings):
            order.append("app")

        def close(self, *args, **kwargs):
            pass

    def no_server(*args, **kwargs):
        raise cli.ConfigError("stop here")

    monkeypatch.setattr(app_module, "AguiApp", App)
    monkeypatch.setattr(cli, "freeze_startup_objects", lambda: order.append("freeze") or 1)
    monkeypatch.setattr(cli, "start_server", no_server)
    args = cli.build_parser().parse_args(["--demo"])
    settings = cli.settings_from(args, {}, "http://127.0.0.1:9/", None, str(tmp_path / "state"))
    with pytest.raises(cli.ConfigError):
        cli.serve(settings, "127.0.0.1", 0, args, "test")
    assert order == ["freeze", "app"]
