// `cvisor cp`: not built yet (issue 4). Until it is, it says so and changes nothing.
import { CvisorError } from "../core/errors.js";
import type { StoreCommandPlan } from "./plan.js";

export function cp(plan: StoreCommandPlan): Promise<number> {
  void plan;
  return Promise.reject(new CvisorError("cp is not available in this version yet", "ENOTYET"));
}
