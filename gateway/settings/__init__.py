"""The ``GatewayConfiguration`` document (component-config style) and its loader."""

from gateway.settings.load import (
    SettingsError,
    build_settings,
    is_gateway_document,
    settings_from_document,
)
from gateway.settings.model import (
    API_VERSION,
    KIND,
    AuthenticationSettings,
    GatewaySettings,
    ProxySettings,
    RequestHeaderSettings,
    RouteTemplateSettings,
    UpstreamSettings,
)

__all__ = [
    "API_VERSION",
    "KIND",
    "AuthenticationSettings",
    "GatewaySettings",
    "ProxySettings",
    "RequestHeaderSettings",
    "RouteTemplateSettings",
    "SettingsError",
    "UpstreamSettings",
    "build_settings",
    "is_gateway_document",
    "settings_from_document",
]
