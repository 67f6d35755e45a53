/**
 * The NVIDIA driver's own answers, from `libcuda.so.1`: the CUDA version the driver implements
 * (`cuDriverGetVersion`, which needs no `cuInit`) and each device's name and compute capability.
 * Thin and typed; `lib/gpu/probe.ts` calls it in a child process, since a broken driver can
 * abort whoever initialises it.
 *
 * @example
 * ```ts
 * import { readCudaDriver } from "./cuda_driver.ts";
 * const d = readCudaDriver();
 * d.cuda; // "13.0"
 * d.devices; // [{ index: 0, name: "NVIDIA H100 80GB HBM3", compute: "9.0" }]
 * ```
 * @module
 */

export type CudaDevice = { index: number; name: string; compute: string };
export type CudaDriver = { cuda: string; devices: CudaDevice[]; error?: string };

const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;

const SYMBOLS = {
  cuDriverGetVersion: { parameters: ["buffer"], result: "i32" },
  cuInit: { parameters: ["u32"], result: "i32" },
  cuDeviceGetCount: { parameters: ["buffer"], result: "i32" },
  cuDeviceGet: { parameters: ["buffer", "i32"], result: "i32" },
  cuDeviceGetName: { parameters: ["buffer", "i32", "i32"], result: "i32" },
  cuDeviceGetAttribute: { parameters: ["buffer", "i32", "i32"], result: "i32" },
} as const;

/** `13000` -> `"13.0"`. */
export function cudaVersionString(v: number): string {
  return `${Math.floor(v / 1000)}.${Math.floor((v % 1000) / 10)}`;
}

/** Reads the driver; throws when `libcuda.so.1` cannot be loaded. */
export function readCudaDriver(lib = "libcuda.so.1"): CudaDriver {
  const cu = Deno.dlopen(lib, SYMBOLS).symbols;
  const int = new Int32Array(1);
  const buf = () => new Uint8Array(int.buffer);
  const check = (what: string, rc: number) => {
    if (rc !== 0) throw new Error(`${what} returned CUDA error ${rc}`);
  };
  check("cuDriverGetVersion", cu.cuDriverGetVersion(buf()));
  const cuda = cudaVersionString(int[0]);
  const rc = cu.cuInit(0);
  // 100 = CUDA_ERROR_NO_DEVICE: a driver without a visible device still has a version.
  if (rc !== 0) return { cuda, devices: [], error: `cuInit returned CUDA error ${rc}` };
  check("cuDeviceGetCount", cu.cuDeviceGetCount(buf()));
  const count = int[0];
  const devices: CudaDevice[] = [];
  for (let i = 0; i < count; i++) {
    check("cuDeviceGet", cu.cuDeviceGet(buf(), i));
    const dev = int[0];
    const name = new Uint8Array(256);
    check("cuDeviceGetName", cu.cuDeviceGetName(name, name.length, dev));
    check(
      "cuDeviceGetAttribute",
      cu.cuDeviceGetAttribute(buf(), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
    );
    const major = int[0];
    check(
      "cuDeviceGetAttribute",
      cu.cuDeviceGetAttribute(buf(), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
    );
    const end = name.indexOf(0);
    devices.push({
      index: i,
      name: new TextDecoder().decode(name.subarray(0, end < 0 ? name.length : end)),
      compute: `${major}.${int[0]}`,
    });
  }
  return { cuda, devices };
}
