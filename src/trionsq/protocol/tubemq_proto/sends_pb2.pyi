from trionsq.protocol.tubemq_proto import broker_pb2 as _broker_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SendMessageCall(_message.Message):
    __slots__ = ("method", "timeout", "request")
    METHOD_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    method: int
    timeout: int
    request: _broker_pb2.SendMessageRequestP2B
    def __init__(self, method: _Optional[int] = ..., timeout: _Optional[int] = ..., request: _Optional[_Union[_broker_pb2.SendMessageRequestP2B, _Mapping]] = ...) -> None: ...

class SendMessageCalls(_message.Message):
    __slots__ = ("call",)
    CALL_FIELD_NUMBER: _ClassVar[int]
    call: _containers.RepeatedCompositeFieldContainer[SendMessageCall]
    def __init__(self, call: _Optional[_Iterable[_Union[SendMessageCall, _Mapping]]] = ...) -> None: ...

class SendMessageReply(_message.Message):
    __slots__ = ("method", "data")
    METHOD_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    method: int
    data: _broker_pb2.SendMessageResponseB2P
    def __init__(self, method: _Optional[int] = ..., data: _Optional[_Union[_broker_pb2.SendMessageResponseB2P, _Mapping]] = ...) -> None: ...
