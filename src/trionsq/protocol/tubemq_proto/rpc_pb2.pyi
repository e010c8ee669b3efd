from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RpcConnHeader(_message.Message):
    __slots__ = ("flag", "traceId", "spanId", "parentId")
    FLAG_FIELD_NUMBER: _ClassVar[int]
    TRACEID_FIELD_NUMBER: _ClassVar[int]
    SPANID_FIELD_NUMBER: _ClassVar[int]
    PARENTID_FIELD_NUMBER: _ClassVar[int]
    flag: int
    traceId: int
    spanId: int
    parentId: int
    def __init__(self, flag: _Optional[int] = ..., traceId: _Optional[int] = ..., spanId: _Optional[int] = ..., parentId: _Optional[int] = ...) -> None: ...

class RequestHeader(_message.Message):
    __slots__ = ("serviceType", "protocolVer")
    SERVICETYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOLVER_FIELD_NUMBER: _ClassVar[int]
    serviceType: int
    protocolVer: int
    def __init__(self, serviceType: _Optional[int] = ..., protocolVer: _Optional[int] = ...) -> None: ...

class RequestBody(_message.Message):
    __slots__ = ("method", "timeout", "request")
    METHOD_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    method: int
    timeout: int
    request: bytes
    def __init__(self, method: _Optional[int] = ..., timeout: _Optional[int] = ..., request: _Optional[bytes] = ...) -> None: ...

class ResponseHeader(_message.Message):
    __slots__ = ("status", "serviceType", "protocolVer")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SUCCESS: _ClassVar[ResponseHeader.Status]
        ERROR: _ClassVar[ResponseHeader.Status]
        FATAL: _ClassVar[ResponseHeader.Status]
    SUCCESS: ResponseHeader.Status
    ERROR: ResponseHeader.Status
    FATAL: ResponseHeader.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SERVICETYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOLVER_FIELD_NUMBER: _ClassVar[int]
    status: ResponseHeader.Status
    serviceType: int
    protocolVer: int
    def __init__(self, status: _Optional[_Union[ResponseHeader.Status, str]] = ..., serviceType: _Optional[int] = ..., protocolVer: _Optional[int] = ...) -> None: ...

class RspExceptionBody(_message.Message):
    __slots__ = ("exceptionName", "stackTrace")
    EXCEPTIONNAME_FIELD_NUMBER: _ClassVar[int]
    STACKTRACE_FIELD_NUMBER: _ClassVar[int]
    exceptionName: str
    stackTrace: str
    def __init__(self, exceptionName: _Optional[str] = ..., stackTrace: _Optional[str] = ...) -> None: ...

class RspResponseBody(_message.Message):
    __slots__ = ("method", "data")
    METHOD_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    method: int
    data: bytes
    def __init__(self, method: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...
