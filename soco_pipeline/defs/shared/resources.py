"""The settings resource: the run's paths, data source and evaluation choices, and its protocol."""

import dagster as dg

from soco_pipeline.settings import Settings


class SocoSettings(dg.ConfigurableResource, Settings):
    """The one settings object of a run (settings.py `Settings`; plain values: sensors read them too)."""

    def protocol(self):
        """The run's ProtocolConfig (assets/protocol.yaml unless `protocol_path` names another file)."""
        from soco_pipeline.evaluation.protocol import load_protocol

        return load_protocol(self.protocol_path)

    def lvlm_protocol(self):
        """The run's SOCO-LVLM item protocol (assets/lvlm_protocol.yaml unless `lvlm_protocol_path` is set)."""
        from soco_pipeline.lvlm.protocol import load_lvlm_protocol

        return load_lvlm_protocol(self.lvlm_protocol_path)

    def settings(self) -> "SocoSettings":
        """This object itself (it is a Settings); kept for callers written before the two were one."""
        return self
