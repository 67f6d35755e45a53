/**
 * Media bytes in a Veo request. An image comes either as `{bytesBase64Encoded, mimeType}` (what the
 * official SDK sends) or as `{inlineData: {mimeType, data}}` (what the REST docs show); both decode
 * to one `ImageInput`. The size limit is checked on the base64 length before anything is decoded,
 * and the bytes must really be the PNG or JPEG the mimeType claims (an omitted mimeType is read
 * from the bytes), so a bad image fails the request instead of the render minutes later.
 *
 * `readInlineBytes` is the shared part, also used for extension videos sent as bytes (the SDK
 * writes those as `{encodedVideo, encoding}`).
 *
 * @example
 * ```ts
 * import { decodeImage } from "./images.ts";
 * declare const pngBase64: string;
 * const r = decodeImage({ inlineData: { mimeType: "image/png", data: pngBase64 } }, "image");
 * if (r.ok) console.log(r.value.mimeType, r.value.bytes.length);
 * else console.log(r.field, r.message);
 * ```
 * @module
 */
import { IMAGE_MIME_TYPES, MAX_IMAGE_BYTES } from "./rule_tables.ts";
import type { ImageInput } from "./types.ts";

export type MediaResult<T> =
  | { ok: true; value: T }
  | { ok: false; message: string; field: string };

/** The wire shapes that carry bytes: a base64 field with its mime type field beside it, or inlineData. */
export type InlineForm = "bytesBase64Encoded" | "encodedVideo" | "inlineData";

/** For the flat forms: the data key and the mime type key next to it. */
const FLAT_FORMS: Readonly<Record<Exclude<InlineForm, "inlineData">, string>> = {
  bytesBase64Encoded: "mimeType",
  encodedVideo: "encoding",
};

const IMAGE_FORMS: readonly InlineForm[] = ["bytesBase64Encoded", "inlineData"];
const IMAGE_KEYS: readonly string[] = ["bytesBase64Encoded", "mimeType", "inlineData"];
const IMAGE_SHAPES = "{bytesBase64Encoded, mimeType} or {inlineData: {mimeType, data}}";

// Standard or URL-safe alphabet (Google's JSON mapping of `bytes` accepts both), padding optional.
const BASE64 = /^(?:[A-Za-z0-9+/]*|[A-Za-z0-9_-]*)={0,2}$/;

/** Decodes standard or URL-safe base64, padded or not; undefined when `text` is not base64. */
export function decodeBase64(text: string): Uint8Array | undefined {
  if (!BASE64.test(text)) return undefined;
  const body = text.replace(/=+$/, "");
  if (body.length % 4 === 1) return undefined;
  if (text.length !== body.length && text.length % 4 !== 0) return undefined;
  const std = body.replaceAll("-", "+").replaceAll("_", "/");
  try {
    return Uint8Array.fromBase64(std + "=".repeat((4 - (std.length % 4)) % 4));
  } catch {
    return undefined;
  }
}

/** Bytes a base64 string decodes to, from its length alone (so oversized input is never decoded). */
export function base64DecodedLength(text: string): number {
  const body = text.replace(/=+$/, "").length;
  return Math.floor((body * 3) / 4);
}

/** The image type the bytes start with (PNG or JPEG signature), if any. */
export function sniffImageMimeType(bytes: Uint8Array): string | undefined {
  const png = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];
  if (bytes.length >= png.length && png.every((b, i) => bytes[i] === b)) return "image/png";
  if (bytes.length >= 3 && bytes[0] === 0xff && bytes[1] === 0xd8 && bytes[2] === 0xff) {
    return "image/jpeg";
  }
  return undefined;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Binary megabytes, as few decimals as needed: 20, 20.5, 20.03. */
function megabytes(n: number): string {
  return String(Math.round((n / (1024 * 1024)) * 100) / 100);
}

/**
 * Reads the one bytes form present in `obj` (among `forms`), checks its keys and decodes it.
 * Returns undefined when none of the forms is present, so the caller can try another shape.
 * `maxBytes` is enforced before decoding.
 */
export function readInlineBytes(
  obj: Record<string, unknown>,
  field: string,
  opts: { forms: readonly InlineForm[]; maxBytes?: number; what: string },
): MediaResult<{ mimeType?: string; bytes: Uint8Array }> | undefined {
  const present = opts.forms.filter((f) => obj[f] !== undefined && obj[f] !== null);
  if (present.length === 0) return undefined;
  const fail = (message: string, at = field) => ({ ok: false as const, message, field: at });
  if (present.length > 1) {
    return fail(`${field} has both ${present.join(" and ")}: send only one of them`);
  }
  const form = present[0];
  let data: unknown;
  let mime: unknown;
  let dataField: string;
  let mimeField: string;
  if (form === "inlineData") {
    const inline = obj.inlineData;
    if (!isRecord(inline)) {
      return fail(`${field}.inlineData must be an object {mimeType, data}`, `${field}.inlineData`);
    }
    const extra = Object.keys(inline).filter((k) => k !== "mimeType" && k !== "data");
    if (extra.length > 0) {
      return fail(
        `Unknown name ${extra.map((k) => JSON.stringify(k)).join(", ")} at '${field}.inlineData'` +
          `: the fields are mimeType, data`,
        `${field}.inlineData.${extra[0]}`,
      );
    }
    [data, mime] = [inline.data, inline.mimeType];
    [dataField, mimeField] = [`${field}.inlineData.data`, `${field}.inlineData.mimeType`];
  } else {
    const mimeKey = FLAT_FORMS[form];
    [data, mime] = [obj[form], obj[mimeKey]];
    [dataField, mimeField] = [`${field}.${form}`, `${field}.${mimeKey}`];
  }
  if (typeof data !== "string") return fail(`${dataField} must be a base64 string`, dataField);
  if (data.length === 0) {
    return fail(`${dataField} is empty: the ${opts.what} has no bytes`, dataField);
  }
  if (mime !== undefined && mime !== null && typeof mime !== "string") {
    return fail(`${mimeField} must be a string`, mimeField);
  }
  if (opts.maxBytes !== undefined) {
    const size = base64DecodedLength(data);
    if (size > opts.maxBytes) {
      return fail(
        `${field} is ${size} bytes (${megabytes(size)} MB) decoded; the ${opts.what} must be at ` +
          `most ${megabytes(opts.maxBytes)} MB (${opts.maxBytes} bytes)`,
      );
    }
  }
  const bytes = decodeBase64(data);
  if (!bytes) return fail(`${dataField} is not valid base64`, dataField);
  return { ok: true, value: { mimeType: typeof mime === "string" ? mime : undefined, bytes } };
}

/**
 * Decodes an image in either wire form into `ImageInput`: PNG or JPEG, at most 20 MB decoded,
 * bytes matching the declared mimeType (read from the bytes when omitted).
 */
export function decodeImage(wire: unknown, field: string): MediaResult<ImageInput> {
  const fail = (message: string, at = field) => ({ ok: false as const, message, field: at });
  if (!isRecord(wire)) return fail(`${field} must be an object: ${IMAGE_SHAPES}`);
  const unknown = Object.keys(wire).filter((k) => !IMAGE_KEYS.includes(k));
  if (unknown.length > 0) {
    return fail(
      `Unknown name ${unknown.map((k) => JSON.stringify(k)).join(", ")} at '${field}': ` +
        `an image is ${IMAGE_SHAPES}`,
      `${field}.${unknown[0]}`,
    );
  }
  const inline = wire.inlineData !== undefined && wire.inlineData !== null;
  if (inline && wire.bytesBase64Encoded === undefined && wire.mimeType !== undefined) {
    return fail(
      `${field}.mimeType goes with bytesBase64Encoded; with inlineData send inlineData.mimeType`,
      `${field}.mimeType`,
    );
  }
  const read = readInlineBytes(wire, field, {
    forms: IMAGE_FORMS,
    maxBytes: MAX_IMAGE_BYTES,
    what: "image",
  });
  if (!read) return fail(`${field} has no image bytes: send ${IMAGE_SHAPES}`);
  if (!read.ok) return read;
  const { bytes } = read.value;
  const declared = read.value.mimeType?.toLowerCase();
  const mimeField = inline ? `${field}.inlineData.mimeType` : `${field}.mimeType`;
  const allowed = IMAGE_MIME_TYPES.join(", ");
  if (declared !== undefined && !IMAGE_MIME_TYPES.includes(declared)) {
    return fail(
      `${mimeField} must be one of ${allowed} (got ${read.value.mimeType})`,
      mimeField,
    );
  }
  const actual = sniffImageMimeType(bytes);
  if (!actual) {
    return fail(
      declared
        ? `${field} is not a ${declared} image: its bytes are neither PNG nor JPEG`
        : `${field} is not an image: its bytes are neither PNG nor JPEG (allowed: ${allowed})`,
    );
  }
  if (declared !== undefined && declared !== actual) {
    return fail(`${mimeField} is ${declared} but the image bytes are ${actual}`, mimeField);
  }
  return { ok: true, value: { mimeType: actual, bytes } };
}
