"""TubeMQ's authorization mapped onto trionsq's AUTH (``--auth-http-address``).

With AUTH off, TubeMQ clients are let in as TubeMQ's server lets them in with its
checks off. With AUTH on, the master authenticates a client by its
``AuthenticateInfo.userName``, sent to the auth server as the AUTH secret (the
TubeMQ password only signs the request; TubeMQ's own server does not check it
either), checks the grants for the producer's topics (publish) or the consumer's
topics and group (subscribe), and hands back an ``authAuthorizedToken``; the client
carries it in later master calls and in every broker call, where the same grants are
checked for the topic (and group) the call touches, with the master's
``visitAuthorizedToken``. Refusals are TubeMQ's CERTIFICATE_FAILURE (415) and
FORBIDDEN (403), with its texts where it has one.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Final

import trio

from ..auth.session import AuthSession
from ..protocol.tubemq_formats import ErrCode

if TYPE_CHECKING:
    from ..config import NsqdConfig
    from ..protocol.tubemq_proto import broker_pb2, master_pb2

__all__ = ["Refused", "TubeAuth"]

Refused = tuple[int, str]
"""TubeMQ's (errCode, errMsg) of a refusal."""
MAX_TOKENS: Final = 100_000
"""Sessions kept at most (the oldest go first): tokens of clients long gone."""


class TubeAuth:
    """AUTH sessions by the token the master handed out."""

    def __init__(self, config: NsqdConfig, visit_token: int) -> None:
        self.config = config
        self.enabled = bool(config.auth_http_addresses)
        self.visit_token = visit_token
        self._sessions: dict[str, AuthSession] = {}

    async def at_master(
        self,
        certificate: master_pb2.MasterCertificateInfo | None,
        remote_address: str,
        wanted: list[tuple[str, str, str]],
    ) -> tuple[str, Refused | None]:
        """Authenticate a master call and check ``wanted`` (verb, topic, channel);
        the token to hand back ("" with AUTH off), or why not."""
        if not self.enabled:
            return "", None
        if certificate is None:
            return "", (ErrCode.CERTIFICATE_FAILURE, "Server required MasterCertificateInfo!")
        token = certificate.authorizedToken
        session = self._sessions.get(token) if token else None
        if session is None:
            if not certificate.HasField("authInfo"):
                return "", (ErrCode.CERTIFICATE_FAILURE, "Illegal value: AuthenticateInfo is null!")
            user = certificate.authInfo.userName.strip()
            if not user:
                return "", (
                    ErrCode.CERTIFICATE_FAILURE,
                    "Illegal value: authInfo.userName is Blank!",
                )
            session = AuthSession(self.config, remote_address=remote_address)
            if not isinstance(await session.authenticate(user.encode()), bytes):
                text = "Illegal value: userName or password is not correct!"
                return "", (ErrCode.CERTIFICATE_FAILURE, text)
            token = secrets.token_urlsafe(24)
            if len(self._sessions) >= MAX_TOKENS:
                self._sessions.pop(next(iter(self._sessions)))
            self._sessions[token] = session
        for verb, topic, channel in wanted:
            refused = await self._check(session, verb, topic, channel)
            if refused is not None:
                return "", refused
        return token, None

    async def at_broker(
        self, info: broker_pb2.AuthorizedInfo | None, verb: str, topic: str, channel: str = ""
    ) -> Refused | None:
        """Check a broker call's authorization (None: allowed)."""
        if not self.enabled:
            return None
        if info is None:
            return ErrCode.CERTIFICATE_FAILURE, "Authorized Info is required!"
        if info.visitAuthorizedToken != self.visit_token:
            return ErrCode.CERTIFICATE_FAILURE, "Visit Authorized Token is invalid!"
        token = info.authAuthorizedToken
        if not token:
            return ErrCode.CERTIFICATE_FAILURE, "authAuthorizedToken is Blank!"
        session = self._sessions.get(token)
        if session is None:
            return ErrCode.CERTIFICATE_FAILURE, "authAuthorizedToken is invalid!"
        return await self._check(session, verb, topic, channel)

    async def _check(
        self, session: AuthSession, verb: str, topic: str, channel: str
    ) -> Refused | None:
        allowed = session.verdict(topic, channel, trio.current_time())
        if allowed is None:  # expired grants: fetched again
            if await session.check(verb, topic, channel) is None:
                return None
            allowed = False
        if allowed:
            return None
        if channel:
            return ErrCode.FORBIDDEN, f"Not authorized to consume topic {topic} as group {channel}"
        return ErrCode.FORBIDDEN, f"Not authorized to produce to topic {topic}"
