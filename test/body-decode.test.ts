// JSON request bodies decoded as the engine's Go decoder reads them (src/api/body):
// case-variant and duplicate keys refused, struct fields renamed to their canonical
// spelling, map keys exact, numbers exact; a ContainerCreate body's deprecated top-level
// host configuration resolved into HostConfig as the engine resolves it, and evaluated so by
// the shipped policy; and the committed engine-schema.json is what
// scripts/gen-body-schema.ts produces from the spec files now. Needs no engine:
//   npx tap dist/test/body-decode.test.js --before= --after=
import fs from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { generateBodySchema, SCHEMA_PATH, union } from '../scripts/gen-body-schema'
import { operations } from '../src/api/catalog/operations'
import { isGatewayError } from '../src/api/errors'
import {
  JsonNumber, decodeBody, encodeBody, fieldAt, formatFieldPath, hasBodySchema, isJsonNumber, MAX_DEPTH, MAX_VALUES,
} from '../src/api/body/decode'
import { numberOf } from '../src/api/body/number'
import { bodySchemas } from '../src/api/body/schema'
import { JsonShape } from '../src/api/body/shape'
import fc from 'fast-check'
import { loadPolicy } from '../src/policy/engine'
import { check } from '../src/policy/tool'

const fixtures = path.resolve(__dirname, '../../test/fixtures/bodies')

/** Decode a UTF-8 string body. */
function decode (op: string, body: string | Buffer): { value: unknown, text: string } {
  const d = decodeBody(op, typeof body === 'string' ? Buffer.from(body, 'utf8') : body)
  return { value: d.value, text: d.bytes.toString('utf8') }
}

/** The BODY_INVALID message decoding throws (fails the test if it does not throw one). */
function refusal (op: string, body: string | Buffer): string {
  try {
    decode(op, body)
  } catch (err) {
    if (isGatewayError(err) && err.code === 'BODY_INVALID' && err.status === 400) return err.message
    throw err
  }
  return '(accepted)'
}

interface Accept { name: string, op: string, body: string, out: string }
interface Refuse { name: string, op: string, body: string | Buffer, error: RegExp }

const accepted: Accept[] = [
  {
    name: 'lower-case privileged alone is canonicalized to Privileged',
    op: 'ContainerCreate',
    body: '{"Image":"busybox","HostConfig":{"privileged":true}}',
    out: '{"Image":"busybox","HostConfig":{"Privileged":true}}',
  },
  {
    name: 'any case of a field is canonicalized, at every level',
    op: 'ContainerCreate',
    body: '{"IMAGE":"busybox","hostconfig":{"PRIVILEGED":false,"capAdd":["NET_ADMIN"],"restartpolicy":{"name":"always"}}}',
    out: '{"Image":"busybox","HostConfig":{"Privileged":false,"CapAdd":["NET_ADMIN"],"RestartPolicy":{"Name":"always"}}}',
  },
  {
    name: 'escaped key names are unescaped before matching',
    op: 'ContainerCreate',
    body: '{"Host\\u0043onfig":{"\\u0070rivileged":true}}',
    out: '{"HostConfig":{"Privileged":true}}',
  },
  {
    name: 'Labels keys are exact: a and A are two labels',
    op: 'ContainerCreate',
    body: '{"Labels":{"a":"1","A":"2","com.example.Team":"x"}}',
    out: '{"Labels":{"a":"1","A":"2","com.example.Team":"x"}}',
  },
  {
    name: 'Sysctls, ExposedPorts and DriverOpts keys are exact',
    op: 'ContainerCreate',
    body: '{"exposedports":{"80/tcp":{},"80/TCP":{}},"hostconfig":{"sysctls":{"net.ipv4.ip_forward":"1","NET.IPV4.IP_FORWARD":"0"}}}',
    out: '{"ExposedPorts":{"80/tcp":{},"80/TCP":{}},"HostConfig":{"Sysctls":{"net.ipv4.ip_forward":"1","NET.IPV4.IP_FORWARD":"0"}}}',
  },
  {
    name: 'map values that are structs: NetworkingConfig.EndpointsConfig',
    op: 'ContainerCreate',
    body: '{"networkingconfig":{"endpointsconfig":{"MyNet":{"aliases":["web"],"ipamconfig":{"ipv4address":"10.0.0.2"},"driveropts":{"k":"v","K":"w"}},"mynet":{"Links":null}}}}',
    out: '{"NetworkingConfig":{"EndpointsConfig":{"MyNet":{"Aliases":["web"],"IPAMConfig":{"IPv4Address":"10.0.0.2"},"DriverOpts":{"k":"v","K":"w"}},"mynet":{"Links":null}}}}',
  },
  {
    name: 'arrays of structs: HostConfig.Mounts, type -> Type',
    op: 'ContainerCreate',
    body: '{"HostConfig":{"Mounts":[{"type":"bind","source":"/","target":"/host","bindoptions":{"propagation":"rshared"}},{"TYPE":"volume","Source":"v","Target":"/v","volumeoptions":{"labels":{"x":"1","X":"2"}}}]}}',
    out: '{"HostConfig":{"Mounts":[{"Type":"bind","Source":"/","Target":"/host","BindOptions":{"Propagation":"rshared"}},{"Type":"volume","Source":"v","Target":"/v","VolumeOptions":{"Labels":{"x":"1","X":"2"}}}]}}',
  },
  {
    name: 'ServiceCreate: TaskTemplate.ContainerSpec.Privileges, deep',
    op: 'ServiceCreate',
    body: '{"name":"web","tasktemplate":{"containerspec":{"image":"nginx","privileges":{"nonewprivileges":false,"seccomp":{"mode":"unconfined"},"selinuxcontext":{"disable":true}},"capabilityadd":["CAP_SYS_ADMIN"]}}}',
    out: '{"Name":"web","TaskTemplate":{"ContainerSpec":{"Image":"nginx","Privileges":{"NoNewPrivileges":false,"Seccomp":{"Mode":"unconfined"},"SELinuxContext":{"Disable":true}},"CapabilityAdd":["CAP_SYS_ADMIN"]}}}',
  },
  {
    name: 'TaskTemplate.PluginSpec: the engine\'s lower-case fields, which the spec misnames (a generator correction)',
    op: 'ServiceUpdate',
    body: '{"TaskTemplate":{"PluginSpec":{"Name":"p","Privileges":[{"Name":"network","Value":["host"]}],"ENV":["A=1"]}}}',
    out: '{"TaskTemplate":{"PluginSpec":{"Name":"p","privileges":[{"name":"network","value":["host"]}],"env":["A=1"]}}}',
  },
  {
    name: 'fields of v1.41 only and of v1.56 only are both known (union)',
    op: 'NetworkCreate',
    body: '{"name":"n","checkduplicate":true,"enableipv4":true}',
    out: '{"Name":"n","CheckDuplicate":true,"EnableIPv4":true}',
  },
  {
    name: 'unknown fields are kept verbatim, with what is under them',
    op: 'ContainerCreate',
    body: '{"image":"x","FooBar":1,"HostConfig":{"notAField":{"a":1,"A":2,"privileged":true}}}',
    out: '{"Image":"x","FooBar":1,"HostConfig":{"notAField":{"a":1,"A":2,"privileged":true}}}',
  },
  {
    name: 'PluginSet: an array of strings',
    op: 'PluginSet',
    body: '["DEBUG=1", "A=2"]\n',
    out: '["DEBUG=1","A=2"]',
  },
  {
    name: 'PluginSet: null (a Go client\'s nil slice)',
    op: 'PluginSet',
    body: 'null',
    out: 'null',
  },
  {
    name: 'PluginPull: an array of privilege structs',
    op: 'PluginPull',
    body: '[{"name":"network","description":"","value":["host"]}]',
    out: '[{"Name":"network","Description":"","Value":["host"]}]',
  },
  {
    name: 'ExecStart',
    op: 'ExecStart',
    body: '{"detach":true,"tty":false}',
    out: '{"Detach":true,"Tty":false}',
  },
  {
    name: 'int64 max and min, and other number spellings, survive byte-exact',
    op: 'ContainerCreate',
    body: '{"HostConfig":{"Memory":9223372036854775807,"MemorySwap":-9223372036854775808,"CpuShares":1.0,"NanoCpus":-0,"ShmSize":1e3,"PidsLimit":1E+2,"CpuPercent":0.1000000000000000055511151231257827}}',
    out: '{"HostConfig":{"Memory":9223372036854775807,"MemorySwap":-9223372036854775808,"CpuShares":1.0,"NanoCpus":-0,"ShmSize":1e3,"PidsLimit":1E+2,"CpuPercent":0.1000000000000000055511151231257827}}',
  },
  {
    name: 'whitespace anywhere and a trailing newline (Go\'s json.Encoder) are fine',
    op: 'ContainerCreate',
    body: ' \t{ "Image" : "x" ,\r\n "Cmd" : [ "a" , "b" ] }\n',
    out: '{"Image":"x","Cmd":["a","b"]}',
  },
  {
    name: 'non-ASCII map keys and values are fine; string escapes are re-encoded canonically',
    op: 'ContainerCreate',
    body: '{"Labels":{"ſ":"K","emoji":"\\ud83d\\ude00","esc":"\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9"}}',
    out: '{"Labels":{"ſ":"K","emoji":"😀","esc":"\\"\\\\/\\b\\f\\n\\r\\té"}}',
  },
  {
    name: '__proto__ is an ordinary key',
    op: 'ContainerCreate',
    body: '{"Labels":{"__proto__":"x","constructor":"y"},"__proto__":{"a":1}}',
    out: '{"Labels":{"__proto__":"x","constructor":"y"},"__proto__":{"a":1}}',
  },
  {
    name: 'operations without a schema: generic, nothing renamed, case variants allowed',
    op: 'NoSuchOperation',
    body: '{"privileged":true,"Privileged":false,"x":[1,{"a":null}]}',
    out: '{"privileged":true,"Privileged":false,"x":[1,{"a":null}]}',
  },
  // ContainerCreate's deprecated top-level host configuration (runconfig.ContainerConfigWrapper):
  // resolved into HostConfig as the engine's getHostConfig resolves it (quirks.ts).
  {
    name: 'legacy: no HostConfig, the top-level host fields are the host config (moved, in order)',
    op: 'ContainerCreate',
    body: '{"Image":"busybox","Privileged":true,"Cmd":["true"],"Binds":["/etc:/x"],"Runtime":"runc"}',
    out: '{"Image":"busybox","Cmd":["true"],"HostConfig":{"Privileged":true,"Binds":["/etc:/x"],"Runtime":"runc"}}',
  },
  {
    name: 'legacy: top-level host fields in any case are canonicalized, nested structs too',
    op: 'ContainerCreate',
    body: '{"image":"busybox","privileged":true,"RUNTIME":"runc","logconfig":{"type":"none"},"mounts":[{"type":"bind","source":"/"}]}',
    out: '{"Image":"busybox","HostConfig":{"Privileged":true,"Runtime":"runc","LogConfig":{"Type":"none"},"Mounts":[{"Type":"bind","Source":"/"}]}}',
  },
  {
    name: 'legacy: HostConfig null counts as absent',
    op: 'ContainerCreate',
    body: '{"HostConfig":null,"Image":"busybox","Memory":67108864}',
    out: '{"HostConfig":{"Memory":67108864},"Image":"busybox"}',
  },
  {
    name: 'legacy: a top-level host field that is null still makes a host config',
    op: 'ContainerCreate',
    body: '{"Image":"busybox","Privileged":null}',
    out: '{"Image":"busybox","HostConfig":{"Privileged":null}}',
  },
  {
    name: 'legacy: beside HostConfig, top-level host fields are ignored (docker-py\'s runtime=)',
    op: 'ContainerCreate',
    body: '{"Image":"busybox","Runtime":"sysbox-runc","Privileged":true,"HostConfig":{"NetworkMode":"default"},"Binds":["/:/host"],"CapAdd":["ALL"]}',
    out: '{"Image":"busybox","HostConfig":{"NetworkMode":"default"}}',
  },
  {
    name: 'legacy: beside an empty HostConfig, Memory, MemorySwap, CpuShares, CpusetCpus, VolumeDriver are copied in',
    op: 'ContainerCreate',
    body: '{"Image":"busybox","Memory":67108864,"MemorySwap":-1,"CpuShares":512,"CpusetCpus":"0","VolumeDriver":"local","PidsLimit":-1,"HostConfig":{}}',
    out: '{"Image":"busybox","HostConfig":{"Memory":67108864,"MemorySwap":-1,"CpuShares":512,"CpusetCpus":"0","VolumeDriver":"local"}}',
  },
  {
    name: 'legacy: copied only over a zero value (absent, null, 0, -0, ""), never over a set one',
    op: 'ContainerCreate',
    body: '{"HostConfig":{"Memory":0,"MemorySwap":null,"CpuShares":-0,"CpusetCpus":"","VolumeDriver":"mine"},"Memory":1,"MemorySwap":2,"CpuShares":3,"CpusetCpus":"1","VolumeDriver":"theirs"}',
    out: '{"HostConfig":{"Memory":1,"MemorySwap":2,"CpuShares":3,"CpusetCpus":"1","VolumeDriver":"mine"}}',
  },
  {
    name: 'legacy: a zero or null top-level value copies nothing',
    op: 'ContainerCreate',
    body: '{"HostConfig":{"Memory":5},"CpuShares":0,"MemorySwap":null,"CpusetCpus":"","Memory":7}',
    out: '{"HostConfig":{"Memory":5}}',
  },
  {
    name: 'legacy: numbers are copied exactly',
    op: 'ContainerCreate',
    body: '{"HostConfig":{},"Memory":9223372036854775807}',
    out: '{"HostConfig":{"Memory":9223372036854775807}}',
  },
  {
    name: 'legacy: a HostConfig value the engine cannot decode is not overwritten (the engine refuses it)',
    op: 'ContainerCreate',
    body: '{"HostConfig":{"Memory":"lots"},"Memory":5}',
    out: '{"HostConfig":{"Memory":"lots"}}',
  },
  {
    name: 'legacy: Cpuset fills an empty CpusetCpus of a HostConfig object',
    op: 'ContainerCreate',
    body: '{"Image":"busybox","Cpuset":"0","HostConfig":{"CpusetCpus":""}}',
    out: '{"Image":"busybox","HostConfig":{"CpusetCpus":"0"}}',
  },
  {
    name: 'legacy: Cpuset after a top-level CpusetCpus (copied first)',
    op: 'ContainerCreate',
    body: '{"Cpuset":"0","CpusetCpus":"0-1","HostConfig":{}}',
    out: '{"HostConfig":{"CpusetCpus":"0-1"}}',
  },
  {
    name: 'legacy: Cpuset fills the CpusetCpus of a top-level host config, not a set one',
    op: 'ContainerCreate',
    body: '{"cpuset":"1","Memory":1,"Privileged":false}',
    out: '{"HostConfig":{"Memory":1,"Privileged":false,"CpusetCpus":"1"}}',
  },
  {
    name: 'legacy: Cpuset beside a set HostConfig.CpusetCpus is dropped',
    op: 'ContainerCreate',
    body: '{"Cpuset":"1","HostConfig":{"CpusetCpus":"0"}}',
    out: '{"HostConfig":{"CpusetCpus":"0"}}',
  },
  {
    name: 'legacy: Cpuset without any host config is dropped (no host config is made: the engine makes none)',
    op: 'ContainerCreate',
    body: '{"Image":"busybox","Cpuset":"0"}',
    out: '{"Image":"busybox"}',
  },
  {
    name: 'legacy: a body without deprecated fields is unchanged, HostConfig null included',
    op: 'ContainerCreate',
    body: '{"Image":"busybox","HostConfig":null,"NetworkingConfig":null,"Volumes":{"/v":{}}}',
    out: '{"Image":"busybox","HostConfig":null,"NetworkingConfig":null,"Volumes":{"/v":{}}}',
  },
  {
    name: 'legacy: only ContainerCreate has the wrapper (ContainerUpdate\'s body is Resources at the top level)',
    op: 'ContainerUpdate',
    body: '{"memory":5,"CpusetCpus":"0"}',
    out: '{"Memory":5,"CpusetCpus":"0"}',
  },
  {
    name: 'operations without a schema: any top-level value',
    op: 'NoSuchOperation',
    body: '"just a string"',
    out: '"just a string"',
  },
]

const refused: Refuse[] = [
  {
    name: 'the Privileged smuggle: two spellings of one field',
    op: 'ContainerCreate',
    body: '{"Image":"busybox","HostConfig":{"Privileged":false,"privileged":true}}',
    error: /^invalid request body: duplicate field HostConfig\.Privileged \("Privileged" and "privileged"\)$/,
  },
  {
    name: 'two spellings, neither canonical',
    op: 'ContainerCreate',
    body: '{"HostConfig":{"PRIVILEGED":false,"privileged":true}}',
    error: /duplicate field HostConfig\.Privileged \("PRIVILEGED" and "privileged"\)/,
  },
  {
    name: 'two spellings, canonical second',
    op: 'ContainerCreate',
    body: '{"HostConfig":{"privileged":true,"Privileged":false}}',
    error: /duplicate field HostConfig\.Privileged \("privileged" and "Privileged"\)$/,
  },
  {
    name: 'the same non-canonical spelling twice',
    op: 'ContainerCreate',
    body: '{"HostConfig":{"privileged":false,"privileged":true}}',
    error: /duplicate field HostConfig\.Privileged$/,
  },
  {
    name: 'two spellings of a nested struct (Go would merge the two objects)',
    op: 'ContainerCreate',
    body: '{"HostConfig":{"Privileged":true},"hostConfig":{"Memory":1}}',
    error: /duplicate field HostConfig \("HostConfig" and "hostConfig"\)/,
  },
  {
    name: 'an escaped spelling of the same field',
    op: 'ContainerCreate',
    body: '{"HostConfig":{"Privileged":false,"\\u0050rivileged":true}}',
    error: /duplicate field HostConfig\.Privileged$/,
  },
  {
    name: 'exact duplicate field',
    op: 'ContainerCreate',
    body: '{"Image":"a","Image":"b"}',
    error: /^invalid request body: duplicate field Image$/,
  },
  {
    name: 'exact duplicate map key',
    op: 'ContainerCreate',
    body: '{"Labels":{"com.example.a":"1","com.example.a":"2"}}',
    error: /^invalid request body: duplicate key Labels\["com\.example\.a"\]$/,
  },
  {
    name: 'exact duplicate key in an unknown field',
    op: 'ContainerCreate',
    body: '{"Unknown":{"a":1,"a":1}}',
    error: /duplicate key Unknown\.a$/,
  },
  {
    name: 'exact duplicate key for an operation without a schema',
    op: 'NoSuchOperation',
    body: '[{"a":1,"a":2}]',
    error: /duplicate key \[0\]\.a$/,
  },
  {
    name: 'case variants of a field the schema does not know',
    op: 'ContainerCreate',
    body: '{"Image":"x","fooBar":1,"FOOBAR":2}',
    error: /duplicate field fooBar \("fooBar" and "FOOBAR"\)/,
  },
  {
    name: 'case variants inside a map value struct',
    op: 'ContainerCreate',
    body: '{"NetworkingConfig":{"EndpointsConfig":{"n":{"Aliases":["a"],"aliases":["b"]}}}}',
    error: /duplicate field NetworkingConfig\.EndpointsConfig\.n\.Aliases \("Aliases" and "aliases"\)/,
  },
  {
    name: 'case variants inside an array of structs',
    op: 'ContainerCreate',
    body: '{"HostConfig":{"Mounts":[{"Type":"bind"},{"Type":"volume","TYPE":"bind"}]}}',
    error: /duplicate field HostConfig\.Mounts\[1\]\.Type \("Type" and "TYPE"\)/,
  },
  {
    name: 'case variants deep in ServiceCreate',
    op: 'ServiceCreate',
    body: '{"TaskTemplate":{"ContainerSpec":{"Privileges":{"NoNewPrivileges":true,"noNewPrivileges":false}}}}',
    error: /duplicate field TaskTemplate\.ContainerSpec\.Privileges\.NoNewPrivileges/,
  },
  {
    name: 'long s (U+017F) folds to s in Go: refused',
    op: 'ContainerCreate',
    body: '{"HostConfig":{"ſecurityOpt":["seccomp=unconfined"]}}',
    error: /^invalid request body: non-ASCII field name HostConfig\["ſecurityOpt"\]$/,
  },
  {
    name: 'Kelvin sign (U+212A) folds to k in Go: refused, also when escaped',
    op: 'ServiceCreate',
    body: '{"TaskTemplate":{"ContainerSpec":{"\\u212aeep":1}}}',
    error: /non-ASCII field name TaskTemplate\.ContainerSpec\["\u212aeep"\]/,
  },
  {
    name: 'any non-ASCII struct key',
    op: 'ContainerCreate',
    body: '{"Imagé":"x"}',
    error: /non-ASCII field name \["Imagé"\]/,
  },
  { name: 'trailing garbage', op: 'ContainerCreate', body: '{"Image":"x"} x', error: /not valid JSON: unexpected data after the JSON value \("x"\) at byte 14$/ },
  { name: 'a second JSON value', op: 'ContainerCreate', body: '{"Image":"x"}{"Image":"y"}', error: /unexpected data after the JSON value/ },
  { name: 'a NUL after the value', op: 'ContainerCreate', body: '{"Image":"x"}\u0000', error: /unexpected data after the JSON value \(U\+0000\)/ },
  { name: 'whitespace only', op: 'ContainerCreate', body: ' \n', error: /empty \(only whitespace\)/ },
  { name: 'a byte order mark', op: 'ContainerCreate', body: '\ufeff{"Image":"x"}', error: /byte order mark/ },
  { name: 'invalid UTF-8', op: 'ContainerCreate', body: Buffer.from([0x7b, 0x22, 0xff, 0x22, 0x3a, 0x31, 0x7d]), error: /not valid UTF-8/ },
  { name: 'a lone surrogate escape', op: 'ContainerCreate', body: '{"Image":"\\ud800x"}', error: /lone UTF-16 surrogate/ },
  { name: 'a lone low surrogate escape', op: 'ContainerCreate', body: '{"Image":"\\udc00"}', error: /lone UTF-16 surrogate/ },
  { name: 'a raw control character in a string', op: 'ContainerCreate', body: '{"Image":"a\nb"}', error: /control character in a string/ },
  { name: 'an invalid escape', op: 'ContainerCreate', body: '{"Image":"\\x41"}', error: /invalid escape/ },
  { name: 'an unterminated string', op: 'ContainerCreate', body: '{"Image":"abc', error: /unexpected end of input/ },
  { name: 'truncated object', op: 'ContainerCreate', body: '{"Image":"x",', error: /unexpected end of input/ },
  { name: 'trailing comma', op: 'ContainerCreate', body: '{"Cmd":["a",]}', error: /expected a JSON value \("\]"\)/ },
  { name: 'single quotes', op: 'ContainerCreate', body: "{'Image':'x'}", error: /expected a string key/ },
  { name: 'leading zero', op: 'ContainerCreate', body: '{"HostConfig":{"Memory":01}}', error: /expected ',' or '}'/ },
  { name: 'a bare fraction', op: 'ContainerCreate', body: '{"HostConfig":{"Memory":.5}}', error: /expected a JSON value/ },
  { name: 'a dangling decimal point', op: 'ContainerCreate', body: '{"HostConfig":{"Memory":1.}}', error: /expected ',' or '}'/ },
  { name: 'a plus sign', op: 'ContainerCreate', body: '{"HostConfig":{"Memory":+1}}', error: /expected a JSON value/ },
  { name: 'NaN', op: 'ContainerCreate', body: '{"HostConfig":{"Memory":NaN}}', error: /expected a JSON value/ },
  { name: 'a lone minus', op: 'ContainerCreate', body: '{"HostConfig":{"Memory":-}}', error: /invalid number/ },
  { name: 'a misspelled literal', op: 'ContainerCreate', body: '{"Tty":tru}', error: /invalid literal/ },
  { name: 'ContainerCreate body that is an array', op: 'ContainerCreate', body: '[{"Image":"x"}]', error: /^ContainerCreate request body must be a JSON object, not an array$/ },
  { name: 'ContainerCreate body that is null', op: 'ContainerCreate', body: 'null', error: /must be a JSON object, not null/ },
  { name: 'ContainerUpdate body that is a string', op: 'ContainerUpdate', body: '"x"', error: /must be a JSON object, not a string/ },
  { name: 'PluginSet body that is an object', op: 'PluginSet', body: '{"DEBUG":"1"}', error: /^PluginSet request body must be a JSON array, not an object$/ },
  { name: 'PluginPull body that is a number', op: 'PluginPull', body: '1', error: /must be a JSON array, not a number/ },
  {
    name: 'legacy: a top-level host field and its case variant (Go would take the last)',
    op: 'ContainerCreate',
    body: '{"Image":"busybox","Privileged":false,"privileged":true}',
    error: /^invalid request body: duplicate field Privileged \("Privileged" and "privileged"\)$/,
  },
  {
    name: 'legacy: case variants inside a top-level host struct',
    op: 'ContainerCreate',
    body: '{"LogConfig":{"Type":"none","type":"json-file"}}',
    error: /duplicate field LogConfig\.Type \("Type" and "type"\)/,
  },
  {
    name: 'legacy: a HostConfig that is not an object or null (the engine refuses it)',
    op: 'ContainerCreate',
    body: '{"Image":"busybox","HostConfig":"privileged","Privileged":true}',
    error: /^invalid request body: HostConfig must be a JSON object or null, not a string$/,
  },
  {
    name: 'legacy: a HostConfig that is an array',
    op: 'ContainerCreate',
    body: '{"HostConfig":[]}',
    error: /HostConfig must be a JSON object or null, not an array$/,
  },
  {
    name: 'legacy: a top-level Memory beside HostConfig that int64 cannot hold (the engine refuses it)',
    op: 'ContainerCreate',
    body: '{"HostConfig":{},"Memory":1.5}',
    error: /^invalid request body: Memory at the top level \(deprecated: the engine copies it into an empty HostConfig\.Memory\) must be a 64-bit integer or null; send HostConfig\.Memory instead$/,
  },
  {
    name: 'legacy: a top-level CpuShares beside HostConfig past int64',
    op: 'ContainerCreate',
    body: '{"HostConfig":{},"CpuShares":9223372036854775808}',
    error: /CpuShares at the top level .* must be a 64-bit integer or null/,
  },
  {
    name: 'legacy: a top-level VolumeDriver beside HostConfig that is not a string',
    op: 'ContainerCreate',
    body: '{"HostConfig":{},"VolumeDriver":1}',
    error: /VolumeDriver at the top level .* must be a string or null; send HostConfig\.VolumeDriver instead$/,
  },
  {
    name: 'legacy: a Cpuset that is not a string',
    op: 'ContainerCreate',
    body: '{"Cpuset":0}',
    error: /^invalid request body: Cpuset at the top level \(deprecated: the engine copies it into an empty HostConfig\.CpusetCpus\) must be a string or null; send HostConfig\.CpusetCpus instead$/,
  },
  {
    name: 'nesting deeper than MAX_DEPTH',
    op: 'ContainerCreate',
    body: `{"Deep":${'['.repeat(MAX_DEPTH)}${']'.repeat(MAX_DEPTH)}}`,
    error: new RegExp(`nested deeper than ${MAX_DEPTH} levels at \\.\\.\\.(\\[0\\])+$`),
  },
  {
    name: 'more than MAX_VALUES values (refused before the policy reads them)',
    op: 'ContainerCreate',
    body: `{"Image":"x","Env":[${Array(MAX_VALUES).fill('"A=b"').join(',')}]}`,
    error: new RegExp(`more than ${MAX_VALUES} values`),
  },
]

t.test('accepted bodies decode to their canonical form', async (t) => {
  for (const c of accepted) {
    const { text } = decode(c.op, c.body)
    t.equal(text, c.out, c.name)
    // The canonical form is a fixed point.
    t.equal(decode(c.op, c.out).text, c.out, `${c.name} (canonical form decodes to itself)`)
  }
})

t.test('refused bodies are BODY_INVALID with a message naming the place', async (t) => {
  for (const c of refused) t.match(refusal(c.op, c.body), c.error, c.name)
})

t.test('nesting up to MAX_DEPTH is fine', async (t) => {
  const body = `${'['.repeat(MAX_DEPTH - 1)}${']'.repeat(MAX_DEPTH - 1)}`
  t.equal(decode('ContainerCreate', `{"Deep":${body}}`).text, `{"Deep":${body}}`)
})

t.test('an empty body is no body', async (t) => {
  const d = decodeBody('ContainerCreate', Buffer.alloc(0))
  t.equal(d.value, undefined)
  t.equal(d.bytes.length, 0)
  t.equal(encodeBody(undefined).length, 0)
})

t.test('the decoded value: null-prototype objects, JsonNumbers, plain strings and arrays', async (t) => {
  const { value } = decode('ContainerCreate', '{"Image":"x","Cmd":["a"],"Tty":true,"Entrypoint":null,"Labels":{"__proto__":"p"},"HostConfig":{"privileged":true,"Memory":9223372036854775807,"CpuShares":512,"NanoCpus":1.5}}')
  t.equal(fieldAt(value, ['HostConfig', 'Privileged']), true)
  t.equal(fieldAt(value, ['HostConfig', 'privileged']), undefined, 'only the canonical spelling is present')
  t.equal(fieldAt(value, ['Cmd', 0]), 'a')
  t.equal(fieldAt(value, ['Entrypoint']), null)
  t.equal(fieldAt(value, ['Labels', '__proto__']), 'p')
  t.equal(fieldAt(value, ['Labels', 'toString']), undefined, 'nothing inherited')
  t.equal(fieldAt(value, ['Nope', 'x']), undefined)
  t.equal(Object.getPrototypeOf(value), null)
  t.equal(Object.getPrototypeOf(fieldAt(value, ['HostConfig'])), null)

  const mem = fieldAt(value, ['HostConfig', 'Memory'])
  t.ok(isJsonNumber(mem), 'numbers are JsonNumbers')
  if (!(mem instanceof JsonNumber)) throw new Error('unreachable')
  t.equal(mem.text, '9223372036854775807', 'exact text')
  t.equal(String(mem), '9223372036854775807')
  t.equal(`${mem}`, '9223372036854775807')
  t.equal(mem.toBigInt(), 2n ** 63n - 1n, 'exact integer')
  t.ok(mem.isInteger)
  // eslint-disable-next-line @typescript-eslint/no-loss-of-precision -- the nearest double is the point
  t.equal(Number(mem), 9223372036854775807, 'Number(): the nearest double')
  t.ok((mem as unknown as number) > 8 * 1024 ** 3, 'relational operators compare numerically')

  const shares = fieldAt(value, ['HostConfig', 'CpuShares']) as JsonNumber
  t.ok((shares as unknown as number) > 5 && (shares as unknown as number) <= 512)
  // eslint-disable-next-line eqeqeq -- what == does with a JsonNumber is the point
  t.ok((shares as unknown as number) == 512, '== compares numerically')
  t.not(shares as unknown, 512, '=== does not: compare Number(x)')
  t.equal(Number(shares), 512)
  const cpus = fieldAt(value, ['HostConfig', 'NanoCpus']) as JsonNumber
  t.equal(Number(cpus), 1.5)
  t.notOk(cpus.isInteger)
  t.throws(() => cpus.toBigInt(), RangeError)
  t.equal(JSON.stringify({ n: shares }), '{"n":512}', 'JSON.stringify writes the double (logs); encodeBody is exact')
})

t.test('encodeBody: rewritten values, exactly', async (t) => {
  const { value } = decode('ContainerCreate', '{"Image":"x","Labels":{"a":"1"},"HostConfig":{"Memory":9223372036854775807}}')
  const v = value as { Labels: Record<string, unknown>, HostConfig: Record<string, unknown>, Image?: unknown }
  v.Labels['owner'] = 'alice'
  v.HostConfig['MemorySwap'] = JsonNumber.from(2n ** 63n - 1n)
  v.HostConfig['CpuShares'] = 512
  v.HostConfig['PidsLimit'] = 100n
  v.HostConfig['CpuPercent'] = JsonNumber.from(0.5)
  v.Image = undefined
  t.equal(encodeBody(v).toString(), '{"Labels":{"a":"1","owner":"alice"},"HostConfig":{"Memory":9223372036854775807,"MemorySwap":9223372036854775807,"CpuShares":512,"PidsLimit":100,"CpuPercent":0.5}}')
  t.equal(encodeBody({ a: [1, 'x', null, false, { b: new JsonNumber('1e400') }] }).toString(), '{"a":[1,"x",null,false,{"b":1e400}]}')
  t.equal(encodeBody('s').toString(), '"s"', 'no trailing newline')
  t.equal(encodeBody(JsonNumber.from(-0)).toString(), '0')

  t.throws(() => encodeBody({ a: NaN }), TypeError)
  t.throws(() => encodeBody({ a: Infinity }), TypeError)
  t.throws(() => encodeBody({ a: new Date() }), TypeError)
  t.throws(() => encodeBody({ a: () => 1 }), TypeError)
  t.throws(() => encodeBody([undefined]), TypeError)
  t.throws(() => encodeBody({ s: 'a\ud800' }), TypeError)
  t.throws(() => encodeBody({ '\udc00': 1 }), TypeError)
  const cyclic: Record<string, unknown> = {}
  cyclic.self = cyclic
  t.throws(() => encodeBody(cyclic), TypeError)
  t.throws(() => new JsonNumber('01'), TypeError)
  t.throws(() => new JsonNumber('NaN'), TypeError)
  t.throws(() => JsonNumber.from(NaN), TypeError)
})

t.test('formatFieldPath', async (t) => {
  t.equal(formatFieldPath([]), '')
  t.equal(formatFieldPath(['HostConfig', 'Mounts', 0, 'Type']), 'HostConfig.Mounts[0].Type')
  t.equal(formatFieldPath(['Labels', 'com.example.x']), 'Labels["com.example.x"]')
  t.equal(formatFieldPath([0, 'Name']), '[0].Name')
  t.equal(formatFieldPath(['a"b']), '["a\\"b"]')
})

t.test('a docker CLI ContainerCreate body', async (t) => {
  const raw = fs.readFileSync(path.join(fixtures, 'container-create-cli.json'))
  const d = decodeBody('ContainerCreate', raw)
  t.equal(d.bytes.toString(), raw.toString().trim(), 'already canonical: forwarded unchanged')
  t.equal(fieldAt(d.value, ['HostConfig', 'Privileged']), false)
  t.equal(fieldAt(d.value, ['HostConfig', 'PortBindings', '80/tcp', 0, 'HostPort']), '8080')
  t.equal(Number(fieldAt(d.value, ['HostConfig', 'MemorySwappiness'])), -1)
})

t.test('the shipped policy evaluates, and forwards, the host config the engine resolves from a legacy body', async (t) => {
  const policy = await loadPolicy(path.resolve(__dirname, '../../policies'))
  const tenant = { subject: 'bob', tenant: 'team-a', roles: ['tenant'] }
  const create = async (body: string): Promise<Awaited<ReturnType<typeof check>>> =>
    await check(policy, tenant, 'POST', '/v1.41/containers/create', Buffer.from(body))
  const forwarded = (r: Awaited<ReturnType<typeof check>>): unknown => JSON.parse(r.body ?? 'null')

  for (const body of ['{"Image":"busybox","Privileged":true}', '{"Image":"busybox","privileged":true,"HostConfig":null}']) {
    const r = await create(body)
    t.same([r.decision, r.rule], ['deny', 'no-privileged'], `no HostConfig: the top-level Privileged is the container's (${body})`)
  }
  t.same([(await create('{"Image":"busybox","Runtime":"sysbox-runc"}')).rule], ['runtime'], 'no HostConfig: a top-level Runtime is checked')
  t.same([(await create('{"Image":"busybox","Binds":["/etc:/x"]}')).rule], ['host-binds'], 'no HostConfig: top-level Binds are checked')

  // The tenant defaults of rewrites.yaml for /dev/shm and logging.
  const LOG_AND_SHM = { ShmSize: 67108864, LogConfig: { Type: 'json-file', Config: { 'max-size': '10m', 'max-file': '3' } } }
  const ignored = await create('{"Image":"busybox","Privileged":true,"Runtime":"sysbox-runc","Binds":["/:/h"],"HostConfig":{}}')
  t.equal(ignored.decision, 'allow', 'beside HostConfig the engine ignores them: allowed')
  t.same(forwarded(ignored), { Image: 'busybox', HostConfig: { SecurityOpt: ['no-new-privileges'], Memory: 1073741824, PidsLimit: 1024, CgroupnsMode: 'private', ...LOG_AND_SHM } }, 'and forwarded without them')

  const memory = await create('{"Image":"busybox","Memory":33554432,"CpuShares":512,"HostConfig":{"Memory":0}}')
  t.equal(memory.decision, 'allow')
  t.same(forwarded(memory), { Image: 'busybox', HostConfig: { Memory: 33554432, CpuShares: 512, SecurityOpt: ['no-new-privileges'], PidsLimit: 1024, CgroupnsMode: 'private', ...LOG_AND_SHM } },
    'a top-level Memory fills the empty HostConfig.Memory before the rewrites (the 1 GiB default does not replace it)')

  const refused = await create('{"Image":"busybox","Memory":"1g","HostConfig":{}}')
  t.match(refused.error, /^BODY_INVALID: invalid request body: Memory at the top level .* send HostConfig\.Memory instead$/, 'an undecodable merged field: refused, saying what to send')
})

t.test('generic decoding matches JSON.parse on duplicate-free random JSON', async (t) => {
  let seed = 42
  const rnd = (n: number): number => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed % n }
  const strings = ['', 'a', 'A', 'é', '😀', '"q"', 'back\\slash', 'line\nbreak', '\u0001', '__proto__', '10', '2', 'x y']
  const gen = (depth: number): unknown => {
    switch (depth > 4 ? rnd(4) : rnd(7)) {
      case 0: return null
      case 1: return rnd(2) === 0
      case 2: return strings[rnd(strings.length)]
      case 3: return [0, 1, -1, 0.5, 123456789, -2.5e-7, 1e21][rnd(7)]
      case 4: case 5: return Array.from({ length: rnd(4) }, () => gen(depth + 1))
      default: {
        const o: Record<string, unknown> = {}
        for (let i = rnd(5); i > 0; i--) Object.defineProperty(o, strings[rnd(strings.length)], { value: gen(depth + 1), enumerable: true, configurable: true, writable: true })
        return o
      }
    }
  }
  for (let i = 0; i < 300; i++) {
    const text = JSON.stringify(gen(0), null, rnd(2) === 0 ? 0 : 1)
    t.equal(decode('NoSuchOperation', text).text, JSON.stringify(JSON.parse(text)), `random value ${i}`, { diagnostic: false })
  }
})

t.test('JsonShape counts, as the bytes arrive, the values the decoder counts', async (t) => {
  /** The decoder's count: the root, every member value, every array element. */
  const values = (v: unknown): number => Array.isArray(v)
    ? 1 + v.reduce((n: number, x) => n + values(x), 0)
    : v !== null && typeof v === 'object' ? 1 + Object.values(v).reduce((n: number, x) => n + values(x), 0) : 1
  const text = fc.oneof(fc.json(), fc.jsonValue().map((v) => JSON.stringify(v, null, 1)), fc.string({ maxLength: 300 }).map((s) => JSON.stringify({ [s]: [s, { '{': '[', '"': s + s + s }] })))
  fc.assert(fc.property(text, fc.array(fc.nat(), { maxLength: 8 }), (json, cuts) => {
    const bytes = Buffer.from(json)
    const shape = new JsonShape()
    let at = 0
    for (const c of [...cuts.map((x) => x % (bytes.length + 1))].sort((a, b) => a - b)) { shape.push(bytes.subarray(at, c)); at = c }
    shape.push(bytes.subarray(at))
    return shape.count === values(JSON.parse(json))
  }), { numRuns: 2000 })

  const refuses = (body: string, chunk = body.length): string => {
    const shape = new JsonShape()
    try {
      for (let i = 0; i < body.length; i += chunk) shape.push(Buffer.from(body.slice(i, i + chunk)))
    } catch (err) { return (err as Error).message }
    return '(accepted)'
  }
  // At the limits, exactly where the decoder draws them, whole and byte by byte.
  const members = (n: number, v = '1'): string => `{${Array.from({ length: n }, (_x, i) => `"k${i}":${v}`).join(',')}}`
  for (const chunk of [1 << 20, 1]) {
    t.equal(refuses(members(MAX_VALUES - 1), chunk), '(accepted)', `root + ${MAX_VALUES - 1} members (keys do not count), chunks of ${chunk}`)
    t.equal(refuses(members(MAX_VALUES), chunk), `invalid request body: more than ${MAX_VALUES} values`)
    // A string might still be a key: one over is left to the decoder, two over are not.
    t.equal(refuses(members(MAX_VALUES, '"v"'), chunk), '(accepted)')
    t.equal(refuses(members(MAX_VALUES + 1, '"v"'), chunk), `invalid request body: more than ${MAX_VALUES} values`)
    t.equal(refuses(`[${'1,'.repeat(MAX_VALUES - 2)}1]`, chunk), '(accepted)')
    t.equal(refuses(`[${'1,'.repeat(MAX_VALUES - 1)}1]`, chunk), `invalid request body: more than ${MAX_VALUES} values`)
    t.equal(refuses('['.repeat(MAX_DEPTH) + ']'.repeat(MAX_DEPTH), chunk), '(accepted)')
    t.equal(refuses('['.repeat(MAX_DEPTH + 1), chunk), `invalid request body: nested deeper than ${MAX_DEPTH} levels`)
  }
  t.equal(refusal('NoSuchOperation', members(MAX_VALUES - 1)), '(accepted)', 'the decoder agrees')
  t.match(refusal('NoSuchOperation', members(MAX_VALUES)), `more than ${MAX_VALUES} values`)
  t.match(refusal('NoSuchOperation', members(MAX_VALUES, '"v"')), `more than ${MAX_VALUES} values`, 'and is exact where the count is left to it')
  // Structure inside strings is text: brackets, quotes and escapes.
  t.equal(refuses(JSON.stringify({ s: '['.repeat(MAX_DEPTH + 5) + '\\"{' + ','.repeat(MAX_VALUES + 5) })), '(accepted)')
})

t.test('every JSON-body operation of the catalog has a schema, and only those', async (t) => {
  const json = operations.filter((op) => op.body === 'json').map((op) => op.id).sort()
  t.same([...bodySchemas.keys()].sort(), json)
  for (const id of json) t.ok(hasBodySchema(id), id)
  t.notOk(hasBodySchema('ContainerList'))
})

t.test('generator: union of trees', async (t) => {
  const any = { t: 'any' } as const
  t.same(union({ t: 'struct', f: { A: any } }, { t: 'struct', f: { B: any } }, 'X'), { t: 'struct', f: { A: any, B: any } })
  t.same(union(any, { t: 'map', v: any }, 'X'), { t: 'map', v: any }, 'any yields')
  t.same(union({ t: 'array', i: any }, { t: 'array', i: { t: 'struct', f: {} } }, 'X'), { t: 'array', i: { t: 'struct', f: {} } })
  const notes: string[] = []
  t.same(union({ t: 'struct', f: { IPv4: any } }, { t: 'struct', f: { Ipv4: { t: 'map', v: any } } }, 'X', notes), { t: 'struct', f: { Ipv4: { t: 'map', v: any } } }, 'one Go field, the later spelling')
  t.equal(notes.length, 1)
  t.throws(() => union({ t: 'struct', f: {} }, { t: 'map', v: any }, 'X.Y'), /X\.Y: cannot unite a struct with a map/)
})

t.test('the committed engine-schema.json is what the generator produces now', async (t) => {
  const committed = fs.readFileSync(SCHEMA_PATH, 'utf8')
  t.equal(committed, generateBodySchema(), 'run `node dist/scripts/gen-body-schema.js` and commit the result')
})

t.test('numberOf: a body value as a number, never throwing on the decoder\'s objects', async (t) => {
  const { value } = decodeBody('ContainerCreate', Buffer.from('{"HostConfig":{"Memory":1e3,"NanoCpus":{},"PidsLimit":[{}],"CpuShares":"7"}}'))
  const hc = fieldAt(value, ['HostConfig']) as Record<string, unknown>
  t.throws(() => Number(hc.NanoCpus), TypeError, 'Number() of a null-prototype object throws')
  t.equal(numberOf(hc.Memory), 1000)
  t.ok(Number.isNaN(numberOf(hc.NanoCpus)), 'an object is no number')
  t.ok(Number.isNaN(numberOf(hc.PidsLimit)), 'nor an array holding one')
  t.equal(numberOf(hc.CpuShares), 7)
  t.ok(Number.isNaN(numberOf(null)) && Number.isNaN(numberOf(true)))
})
