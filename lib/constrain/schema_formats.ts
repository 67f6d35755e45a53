/**
 * JSON Schema `format`s as regexes the grammar can enforce. Each accepts only values that the
 * validators clients use accept too (ajv-formats' full mode, which Hearth also checks finished
 * calls with): where a format's full language needs lookaround or a length count, the regex is a
 * plainly valid subset (a URL with an `http(s)` scheme and a dotted host, an IPv6 address in its
 * eight-group form, a hostname of at most three labels). Formats that constrain numbers are
 * bounds instead (`NUMBER_FORMATS`); formats that say nothing about validity (`password`,
 * `binary`, `float`, `double`, `int64`) constrain nothing.
 *
 * @example
 * ```ts
 * import { FORMATS, NUMBER_FORMATS } from "./schema_formats.ts";
 * new RegExp(`^(?:${FORMATS.date})$`).test("2024-02-29"); // true
 * NUMBER_FORMATS.int32; // { minimum: -2147483648, maximum: 2147483647 }
 * ```
 * @module
 */

const LEAP_YEAR = "(?:\\d{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)";
const DATE = "(?:\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-" +
  "(?:0[1-9]|[12]\\d|30)|02-(?:0[1-9]|1\\d|2[0-8]))|" + LEAP_YEAR + "-02-29)";
const HH = "(?:[01]\\d|2[0-3])";
const CLOCK = `${HH}:[0-5]\\d:[0-5]\\d(?:\\.\\d{1,9})?`;
const ZONE = `(?:Z|[+-]${HH}:[0-5]\\d)`;
const TIME = `${CLOCK}${ZONE}`;
const LABEL = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
const LOWER_LABEL = "[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?";
const ATOM = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+";
const OCTET = "(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)";
const HEX = "[0-9a-fA-F]";
const PCT = "%[0-9a-fA-F]{2}";
// RFC 3986 path characters (pchar), without `%`, which only starts an escape.
const PCHAR = `(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|${PCT})`;
const SEGMENT_NC = `(?:[A-Za-z0-9._~!$&'()*+,;=@-]|${PCT})`;
const QUERY = `(?:[A-Za-z0-9._~!$&'()*+,;=:@/?-]|${PCT})`;
const HOST = `${LOWER_LABEL}(?:\\.${LOWER_LABEL})*`;
const PATH = `(?:/${PCHAR}*)*`;
const URI = `[a-z][a-z0-9+.-]*://${HOST}(?::\\d{1,5})?${PATH}(?:\\?${QUERY}*)?(?:#${QUERY}*)?`;
const DOMAIN_LABEL = "(?:[a-z0-9]+-)*[a-z0-9]+";
const DIGITS = "\\d+";
const CLOCK_PARTS =
  `(?:${DIGITS}H(?:${DIGITS}M)?(?:${DIGITS}S)?|${DIGITS}M(?:${DIGITS}S)?|${DIGITS}S)`;
const DATE_PARTS = `(?:${DIGITS}Y)?(?:${DIGITS}M)?`;

/** Regexes (full match) for the string formats with a grammar; each accepts only valid values. */
export const FORMATS: Readonly<Record<string, string>> = {
  date: DATE,
  time: TIME,
  "date-time": `${DATE}T${TIME}`,
  "iso-time": `${CLOCK}${ZONE}?`,
  "iso-date-time": `${DATE}T${CLOCK}${ZONE}?`,
  duration: `P(?:${DIGITS}W|${DATE_PARTS}${DIGITS}D(?:T${CLOCK_PARTS})?|` +
    `${DATE_PARTS}(?:${DIGITS}D)?T${CLOCK_PARTS}|${DIGITS}Y(?:${DIGITS}M)?|${DIGITS}M)`,
  uuid: `${HEX}{8}-${HEX}{4}-${HEX}{4}-${HEX}{4}-${HEX}{12}`,
  email: `${ATOM}(?:\\.${ATOM})*@(?:${LABEL}\\.)+${LABEL}`,
  hostname: `${LOWER_LABEL}(?:\\.${LOWER_LABEL}){0,2}`,
  ipv4: `(?:${OCTET}\\.){3}${OCTET}`,
  ipv6: `[0-9a-f]{1,4}(?::[0-9a-f]{1,4}){7}`,
  uri: URI,
  iri: URI,
  "uri-reference": `${URI}|/?${SEGMENT_NC}+${PATH}`,
  "iri-reference": `${URI}|/?${SEGMENT_NC}+${PATH}`,
  url: `https?://${DOMAIN_LABEL}(?:\\.${DOMAIN_LABEL})*\\.[a-z]{2,}(?::\\d{2,5})?(?:/[^\\s]*)?`,
  "uri-template": `(?:[^\\x00-\\x20"'<>%\\\\^\`{|}]|${PCT}|\\{[+#./;?&=,!@|]?[a-z0-9_]+` +
    `(?:,[a-z0-9_]+)*\\})*`,
  "json-pointer": "(?:/(?:[^~/]|~[01])*)*",
  "relative-json-pointer": "(?:0|[1-9]\\d*)(?:#|(?:/(?:[^~/]|~[01])*)*)",
  "json-pointer-uri-fragment": `#(?:/(?:[a-z0-9_.!$&'()*+,;:=@-]|${PCT}|~[01])*)*`,
  byte: "(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?",
  regex: "(?:[A-Za-z0-9 _,:;=/-]|\\\\[dws.])*",
};

/** Formats of numbers, as the bounds they imply. */
export const NUMBER_FORMATS: Readonly<Record<string, { minimum: number; maximum: number }>> = {
  int32: { minimum: -(2 ** 31), maximum: 2 ** 31 - 1 },
};

/** Formats that constrain nothing a grammar would notice (any string, any number). */
export const FREE_FORMATS: ReadonlySet<string> = new Set([
  "password",
  "binary",
  "float",
  "double",
  "int64",
]);
