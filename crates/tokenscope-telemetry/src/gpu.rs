//! The local GPU through NVML, loaded at run time: nothing NVIDIA is needed to
//! build or to run without a GPU, and a missing library or device is a note
//! in the report, not an error.

use crate::kinds::Concepts;
use nvml_wrapper::Nvml;

pub struct LocalGpu {
    nvml: Nvml,
    devices: u32,
    pub names: Vec<String>,
}

impl LocalGpu {
    /// Loads NVML and counts the devices; the error says why there is no GPU to read.
    pub fn open() -> Result<LocalGpu, String> {
        let nvml = Nvml::init()
            .map_err(|e| format!("NVML could not be loaded ({e}); GPU figures are not measured"))?;
        let devices = nvml
            .device_count()
            .map_err(|e| format!("NVML found no GPU ({e})"))?;
        if devices == 0 {
            return Err("NVML found no GPU".into());
        }
        let names = (0..devices)
            .filter_map(|i| nvml.device_by_index(i).ok()?.name().ok())
            .collect();
        Ok(LocalGpu {
            nvml,
            devices,
            names,
        })
    }

    /// Utilisation (time-based, mean over devices), memory, power and energy (sums).
    pub fn sample(&self) -> Concepts {
        let mut c = Concepts::default();
        let (mut util, mut n) = (0.0, 0.0);
        for i in 0..self.devices {
            let Ok(d) = self.nvml.device_by_index(i) else {
                continue;
            };
            if let Ok(u) = d.utilization_rates() {
                util += u.gpu as f64;
                n += 1.0;
            }
            if let Ok(m) = d.memory_info() {
                *c.gpu_memory_used_bytes.get_or_insert(0.0) += m.used as f64;
                *c.gpu_memory_total_bytes.get_or_insert(0.0) += m.total as f64;
            }
            if let Ok(mw) = d.power_usage() {
                *c.gpu_power_w.get_or_insert(0.0) += mw as f64 / 1000.0;
            }
            if let Ok(mj) = d.total_energy_consumption() {
                *c.gpu_energy_j.get_or_insert(0.0) += mj as f64 / 1000.0;
            }
        }
        if n > 0.0 {
            c.gpu_util_time_pct = Some(util / n);
        }
        c
    }
}

// Nvml is a handle to a thread-safe C library.
unsafe impl Send for LocalGpu {}
unsafe impl Sync for LocalGpu {}

#[cfg(test)]
mod tests {
    #[test]
    fn without_a_gpu_opening_says_why() {
        // This machine (and CI) has no NVIDIA driver: the error is a sentence, not a panic.
        if let Err(msg) = super::LocalGpu::open() {
            assert!(msg.contains("NVML") || msg.contains("GPU"), "{msg}");
        }
    }
}
