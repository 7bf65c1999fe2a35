"""APF configuration as text: FlowSchemas and PriorityLevelConfigurations read from YAML,
decoded, defaulted and validated into a ``ConfigSet`` the engine (``gateway.flowcontrol``)
swaps in whole; plus Kubernetes' bootstrap objects and its ensurer."""
