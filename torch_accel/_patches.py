"""The registry of every patch torch_accel makes to PyTorch 2.11 or another library.

Where PyTorch has a hook for what accel needs (device interface, backend for
device, device op overrides, c10d plugins, profiler stubs), torch_accel uses
it. Where it has none, a patch adapts the code in place. Every such patch is
declared here and nowhere else may PyTorch's or a library's attributes be
rebound (tools/check_package.py, run by ``make lint``, enforces it):

- ``SOURCE_SHA256`` names the code each patch adapts, with the sha256 of its
  torch 2.11.0 (and Triton 3.6, safetensors 0.8.0) source (``inspect.getsource``).
  test/test_patches.py checks every entry against the installed packages, so
  an upgrade makes every patch be reviewed.
- A patch is a function decorated with ``@patch(name, ...)``, the names it
  adapts; it receives the original of each name (as found before the patch)
  and installs its replacement. It lives in the module of the area it adapts:
  torch_accel/_inductor/ (FakeTensor, Inductor, Triton's interpreter; one
  module per area), _profiler_patches.py (the profiler), _distributed.py
  (torch.distributed's backend selection), _transfer.py (the CUDA-program
  opt-in: torch.cuda, amp, torch.load and process groups redirected to accel),
  _data_parallel.py (nn.DataParallel), _interop.py (DLPack,
  __cuda_array_interface__), _safetensors.py (safetensors' load_file).
- ``apply(patch, ...)`` is the one way to apply a patch: once per process,
  recording the originals first, so ``original(name)`` always gives the
  unpatched code. Who applies what, and when, is up to the owner of the area
  (Inductor's patches: torch_accel/_inductor/registration.py).

Patches wrap the original rather than copy it, and name the code they adapt
and why. Importing this module imports nothing of PyTorch's.
"""

import hashlib
import importlib
import inspect
import sys
from collections.abc import Callable
from typing import Any

# The code each patch adapts, with the sha256 of its torch 2.11.0 (Triton 3.6, safetensors 0.8.0)
# source. By the module that patches it.
SOURCE_SHA256 = {
    # _inductor/fake_tensor.py
    "torch._subclasses.fake_impls.conv": "ffa40aa86d96c3779f3697e0be7914c936e298b534110201667a784907d041cb",
    # _inductor/backend_choice.py
    "torch._inductor.utils.get_current_backend": "fdbd7dc979ba487185f37d6667845881c297422d2ff5609410dd3d458cde9a86",
    "torch._inductor.utils.is_gpu": "3f477e69f84157f442372f35bdec680c5585f8da58202e38787491bbd246b626",
    "torch._inductor.utils.get_gpu_type": "9f6c073f0df19606d72bd55973da0ab1179a8b36599f7358d89f204fef7c7791",
    "torch._inductor.ir.is_cpu": "5449d162cfd24cbae10a701882c7cbd3562b1b944ae16b46ba39fb2892e791f6",
    "torch._inductor.scheduler.BaseSchedulerNode.is_cpu": "3abf458ee46f55f4b78e8089c736e9b9c3e3813e5e7062d1aadfc92eaac05340",
    # _inductor/device_properties.py
    "torch._inductor.runtime.hints.DeviceProperties.create": "760dfde73f9663e6a4e913be0f534acef2e9329fde0bc94046ec83e1f4fe859a",
    # _inductor/convolution.py
    "torch._inductor.graph.GraphLowering.decide_layout_opt": "bef90675b8c18d39035ff933c70cec0dc09a135e7b6c710ff0d49bd8157b613a",
    "torch._inductor.kernel.conv.convolution": "c56742ea0753e60e358a27fe65d67b6f8526ba6c1ef181dc489cfd4c0a6aa86b",
    # _inductor/lowering.py
    "torch._inductor.lowering.div_prim": "75e87a9bf283a7c2b0b672ef778498974cb4a04a6aa9f34304cbc46c7f445f93",
    "torch._inductor.scheduler.MixOrderReduction.can_fuse": "e481a5ba835e37c924ef1a92c8b4b4b9e2650b04858d9c52c7032bfca148f6ea",
    "torch._inductor.fx_passes.post_grad.prepare_softmax_extra_check": "4be7447c174bbfcc92f4cac9c0ea78b9c52ed076b07f069a6c15f86d23643aa2",
    "torch._inductor.fx_passes.joint_graph.bmm_to_mm": "2905c8031e062f87afe9019c11e0c752b6d71e7e9b0878077450369c96256192",
    "torch._inductor.fx_passes.decompose_mem_bound_mm.check_device": "46d04407ec81235797e6c1c8deb608816ca06cb45100e5db21543fec63c7d766",
    "torch._inductor.lowering.sdpa_constraint": "f06d8ef3241774b9adecf0ccd02148e254b7fcc0c4e14c0ff4dea6617057f49d",
    # _inductor/graphs.py (mode="reduce-overhead")
    "torch._inductor.output_code.CompiledFxGraph.post_compile": "0fa28fd8275d826280a1ed1ddf414c14c480d607ef2851e98671e363104ef119",
    "torch._inductor.cudagraph_utils.check_lowering_disable_cudagraph": "60defaedd101526c16d1e98006d994c5af6c0d1c5be2aa68f47ca10b8e085ff1",
    "torch._inductor.output_code.cudagraph_post_compile": "5640203222393e8e3fad6ee8841b68c4d8a69654428c411514095a155381cd65",
    "torch._inductor.output_code.cudagraph_partition_post_compile": "3972900b57fba1425643273f4119c7593df05a172fc3a23deebbab98bd34bf5a",
    # _inductor/interpreter.py (TORCH_ACCEL_INDUCTOR=triton on the host runtime)
    "torch.utils._triton.has_triton": "99b63406dc8e19922ef4e565418f0af05a3d98d23599c1038e04b38fd9465dcc",
    "torch.utils._triton.triton_backend": "71e9c8ee2d3143634f06bfba6f6afbdb5c9f3413b1feaf8910e05d65b47af00d",
    "torch._inductor.runtime.triton_helpers.set_driver_to_gpu": "a8d38f89bf6ec0175c925040d8e7a824cfb1790d8ff2c8cfbda1763c5495a7f1",
    "triton.language.extra.libdevice.exp": "9c20ec859c16dc6f98c13579874f809405bc61d4986f28591faa2eb68741adbb",
    "triton.runtime.interpreter._patch_lang_tensor": "efc91e4a5c969e2c7e14b35acb5f4bb9e47290c7a45189eb8840b1b6918d1e9a",
    # _inductor/flex_attention.py (FlexAttention: accel as its target)
    "torch.nn.attention.flex_attention._validate_device": "8cb0766dccdb3287b8e65c40fc919ceb70b2c4256694043ed91e58649757f6cc",
    "torch.nn.attention.flex_attention._apply_kernel_options": "e2f6bbbef95a38ec0d10c29434426114eb90a25cc99c338b525d1ce6704db60c",
    "torch._inductor.kernel.flex.flex_attention.flex_attention": "4360fbc09f2c916cefbeedf872f9b24e94b8be6b24788f119e90780131bac993",
    "torch._inductor.kernel.flex.flex_decoding.get_split_k": "9fdf212956fbbda85c0b6e76b685a6f226731477bfac094262cf4c39ada9a667",
    "torch._inductor.choices.InductorChoices.get_config_heuristics": "fddb1a575b70458d520bed1e9f274e4d09fe3ad3dc0b8dac763c64d8f1acde29",
    "torch.cuda.get_device_capability": "6809539b0a673ba65372fc0ac2d0a28ee248b125e32bdce205c996203f098957",
    # _inductor/cpp_wrapper.py (cpp_wrapper and AOTInductor)
    "torch._inductor.codecache._get_cpp_wrapper_header": "44c4cea30d1816a367128ad79c10ab55cce3c247e7fa67c0996644e812723b51",
    "torch._inductor.cpp_builder.get_cpp_torch_device_options": "97cd5a8180fbeba0ea13b0e19beeff84d477b0e4792bf9469a22a6fc63d0d3da",
    # _profiler_patches.py
    "torch.autograd.profiler.profile.__init__": "ea6ecd049a2176606ceda286a514ef780c7d9ac937d531d4e28a9ccd8ed6d018",
    # _distributed.py
    "torch.distributed.distributed_c10d.BackendConfig.__init__": "d928aa616689aa3fa60d89e61cd8718ba5b15b6e0f0de834ff5b7eb000928003",
    "torch.distributed.distributed_c10d._new_process_group_helper": "a525cc222c385ff58c995e9b3bc97eba6ae9107d88ffd0c519d694904cc27e7a",
    # _transfer.py (the CUDA-program opt-in, docs/cuda-programs.md; applied only when opted in)
    "torch.cuda.is_available": "b91a896857c103611c58b84e1455f789393531efa0c56cf7971e931b99fdffce",
    "torch.cuda.device_count": "c7fd457e1134ece0c9f9f67f4a7f94b52ce0dea04db572f66e7967f6961d84b1",
    "torch.cuda.current_device": "6e9804168a5c7f8c0a4e16ce292ac415132e68d9479397c61dddda2329f05259",
    "torch.cuda.set_device": "86c6d0bf42224be6dc806c4e52c9f0e47b062851ca3d65cff0983081333bfa6c",
    "torch.cuda.device": "892054019b0663e565d29e21123a3dc073b15b9660887efceac513b1a2cd4ecc",
    "torch.cuda.device_of": "9bc4c373f872119a48302bdf40bd4a54edc225882842e145019b662a124a2b56",
    "torch.cuda.synchronize": "7055e6143ffee8f141c9900a7b5dd69345e841a3e14c0be02af277f347232dcd",
    "torch.cuda.init": "85035f109983dd08e4015a3411c690033bdb08c38595e33502b726e473062bed",
    "torch.cuda.is_initialized": "0f623fc044a8b1f994d227e2aceb06cc4fa9712352558278a2ceaed6c465da20",
    "torch.cuda.get_device_name": "6f35f689a5716bb2be10c041f07c68266e5887de99f26c3c702cd55ba9ab811c",
    "torch.cuda.get_device_capability": "6809539b0a673ba65372fc0ac2d0a28ee248b125e32bdce205c996203f098957",
    "torch.cuda.get_device_properties": "cb006011f5d15cbabe9a74e7d6e5fed362a5bd21dd382cb64f839b7280eced98",
    "torch.cuda.is_bf16_supported": "dd9ffd146f5fb3a2966c118d9e13819ec26143bb484579eaa6572592e1499bab",
    "torch.cuda.Stream": "f5b9547b46603680f258ece322087387efb052912ca40ccb3e0ece06d33687f8",
    "torch.cuda.Event": "f5fe051e2c600d1f3efe70f0832291b411b8ad2371a3adf2b1370851a8088e9a",
    "torch.cuda.StreamContext": "b15254df850de5fe171e6dedb31f053d769069c9a1bc09b4478a089a1b35c6ac",
    "torch.cuda.stream": "a701c622b6f531dc21a55abc42d31e7305a211ad93234c7744bec6801d1307b0",
    "torch.cuda.current_stream": "ca5387f64ee12c986c8211e4e9e96b021773ad7cb36594d3ef7eda61ec6f10cd",
    "torch.cuda.default_stream": "b0a2135268c651cacc78703c142b8d80b1263a9500acf8a667272e5a4b8759b8",
    "torch.cuda.set_stream": "6f7a1ab4ffc3f51f645ba212a4c803cfb89b437b5db86bd1f5afd513a9537bce",
    "torch.cuda.empty_cache": "bce971e6854fcc536ddce16ab73e91441f44abbe40246e88feaf18e8dfbdee0f",
    "torch.cuda.mem_get_info": "f9ea28f9e6d18dc271cfb23d97fff431fc02c394267952a590939a07944f7c36",
    "torch.cuda.memory_allocated": "0442d2549a6143ede198d8a80e6b559326e0bdebb9be136784c1094316a688a1",
    "torch.cuda.max_memory_allocated": "7d74e1261dc19d05e2f9bc99d05c5dbab854a2e2acf9d1a82bc0d8834f194740",
    "torch.cuda.memory_reserved": "de803da5e53ce7a1a9718cf737a47b0e69c661bd4884f5221291fec647e0ae95",
    "torch.cuda.max_memory_reserved": "60af9cdf5dca4f6a00bd8e97a8d30e046683f1f739b52d60e550ee1c35ab6e55",
    "torch.cuda.memory_cached": "f517ef7c82205261fafa6b5f96d2498a8c6246f2fbe24a3e9d9c242f50d6064b",
    "torch.cuda.max_memory_cached": "259106236c50ffc6d8c91834b68cfee5be520e99be3269e3041388b605e50179",
    "torch.cuda.memory_stats": "9f51df1707461230c2d770035f40ec64faab6f5251c7d0521e15bc21d9b04bd6",
    "torch.cuda.memory_stats_as_nested_dict": "22faec6b2d444326b9893102652b72f2f83caabd9a25de6066ce225afbc05519",
    "torch.cuda.memory_summary": "0b370fea92ca261a6c63183ea079e6106e7a7996e80ca9af3c954b66b7a50d38",
    "torch.cuda.memory_snapshot": "45e91f363f505f4bef30075047bb72f9448a219665f3a543d183a1323c1de3ec",
    "torch.cuda.reset_peak_memory_stats": "766ce5a529a5c05ebc3fa2a96598b9019f7ac818aae36bde35cd7e1319b1abc2",
    "torch.cuda.reset_max_memory_allocated": "45e26b7fab61d645898a8be37511868afb8edc1fbae0f9c2bad59ff901d9c553",
    "torch.cuda.reset_max_memory_cached": "b16a211267c36bc727fa9bab377f08520276ec3abf0dc09967d85e114c8f6089",
    "torch.cuda.reset_accumulated_memory_stats": "cb598f675500e2de06dcf4b450efa87577eb242d82472fd541a94485f44b4f82",
    "torch.cuda.set_per_process_memory_fraction": "68e57e0e24d0a03c4f787890767b86765c559b5838d8505d0c17ccb54a719ac3",
    "torch.cuda.get_per_process_memory_fraction": "1327ca511b6584406a2db14824c9aa58fdefe263012a562a0af92a3d74efdf09",
    "torch.cuda.ipc_collect": "555aacca11558af0d1387297543f2a5304f7cbc10b3d7c9d707edcb6bd3e278d",
    "torch.cuda.manual_seed": "a71497712eba81c903e16f4aa3ba5a51b045b1d4aa9ac981c006878ca8aada20",
    "torch.cuda.manual_seed_all": "e9489253dd7c94fa244053c0430310b3617b25d5554cc22399f4313bea71be7b",
    "torch.cuda.seed": "d34333ec8dbd05fc0ff80b344e741dd0b4bfc4afc0b9e6e49278395ce918dba5",
    "torch.cuda.seed_all": "c4aed4193a459697a6bff83bc37a26f6e1673ded749ec17b69298300968e2bde",
    "torch.cuda.initial_seed": "77b4f9eb53d9fabca9b8dd7aeb4b62560c24b6377bc61885c9d41024baef14f2",
    "torch.cuda.get_rng_state": "1190f97901d79384e381f97b50186090d52ee9dd06dbedec9349f270af938219",
    "torch.cuda.get_rng_state_all": "de36bfb9f90eba1ddcc020e09b87136c0bae2f6ca83a55e7c94c5e701a1bbbb4",
    "torch.cuda.set_rng_state": "2aaed350f20b85692706aa0c08d6a57597b8d50065fa05149e3d6255c68e2de8",
    "torch.cuda.set_rng_state_all": "b779d3c0abe3d703a1c74c4c52414f52342fe91b3053e112c22bdea9d2b17022",
    "torch.cuda.CUDAGraph": "34bd266fbd032403adc9161b3d66ffe6e2339e86eb18d2bef35bd5d5ee036004",
    "torch.cuda.graph": "5c8e47e636178e47eadfe4c906ec3a296730c38a7f84a5bc561d91f50dca9075",
    "torch.cuda.graph_pool_handle": "884b90f1698415037cde4418810379227d44ab83a28c5e1498d9810d9a370cef",
    "torch.cuda.is_current_stream_capturing": "46ad9fe4332b954e95845a39a7d8fd52779535c58c9118236f55192d3995d155",
    "torch.cuda.make_graphed_callables": "d5f73e7d73964a0e7a5b03e5ae1b5466e8492ef67bac7995bde8768f7e4bb666",
    "torch.cuda.ExternalStream": "b2a3c465c2b6007ef1791f69f8f0eab63991df5cee3c710e1bad7ca544259181",
    "torch.cuda.get_stream_from_external": "812fb95b9b22a2aa77e8f02722a122317a14b49e74177911e947e7948e5650d2",
    "torch.cuda.GreenContext": "de6d06df04d58a24cf60801826600e2800e04ee7b67e677659c13915579a0216",
    "torch.cuda.can_device_access_peer": "b90878116d983d796a07b7e11549d1c68f6b21f1164f34f8833f0f6d6f7899ea",
    "torch.cuda.caching_allocator_alloc": "f857c84128de9c687763b3ade0f79d829499304919bcc3d1143633f66c63cf8c",
    "torch.cuda.caching_allocator_delete": "4ad15f743ab1a2e0dfe4d1ea1df7a145939a210e26b1ed683d66e3dd5387f4ea",
    "torch.cuda.caching_allocator_enable": "8a6c858883378676b1e5fae1d39b2a78a77ff73b951b26d9c8da5fac2a463bb6",
    "torch.cuda.CUDAPluggableAllocator": "1ed8d775a252cf8d39804a2be8ca0b4b800063783d343854f8fca568059921c2",
    "torch.cuda.change_current_allocator": "c7c491d584ce5f294349e0681e0bfaeee090729988716ad0d46e2c4e6e766df4",
    "torch.cuda.MemPool": "05d3fbcc3db9419367fff3e091f61bd283d98a0c072feae8f72a2d9c145a94c0",
    "torch.cuda.use_mem_pool": "49f09c168db16fadb4b7a9996c3ba96940eaa058c02b5b374548fbc5ed436114",
    "torch.cuda.cudart": "deadc5834ed4d93359415139b236d6bc4999ab21c2b5cae0ca42a5018279e3a2",
    "torch.cuda.current_blas_handle": "2651fa602b8f1af5b3b7365d73159aebd44ec60e49ad470faade84b0435f361a",
    "torch.cuda.list_gpu_processes": "22eed1970e15ba2f2215fd963776f74ef952fb408a8694eca3c473301caf08ec",
    "torch.cuda.utilization": "6058f3f4561c88733564aef76e21282ea64e25c0dace45e564bc13ab0c976647",
    "torch.cuda.memory_usage": "f8b4f90bd43611152e20d95d131bf0cdda75d5e24c3072be4260b4250cddcd26",
    "torch.cuda.temperature": "2fb453ed1215d94452c675977699209a6306f972d44a85e6e10bc9d4eea5b13d",
    "torch.cuda.power_draw": "e666af67f0e6f07033488abc6a290d65f5f08fae852e4012f84e97e62b825b5f",
    "torch.cuda.clock_rate": "882597f3711480c306a51bb67378332f8342f4096cd8ec95c8b52b79761c9024",
    "torch.cuda.device_memory_used": "2005240bd0d16aa7fd511666cb053829af6c59555113c4a63a470cd5359fcd86",
    "torch.cuda.host_memory_stats": "2bb02a897c5b83f8875e18fdbcd9fd323d8abb0edb17147dd5f348b45e37cacb",
    "torch.cuda.host_memory_stats_as_nested_dict": "8005bc3a5c40870c1d83e7d72e595f1fbb33a146dc620a547e850cc2a44e1834",
    "torch.cuda.reset_accumulated_host_memory_stats": "be3cb3252638d47a45457f11c2e81212f6e86aed695fe909bd06a3edeeb1ac26",
    "torch.cuda.reset_peak_host_memory_stats": "73f9e4b97f56832befb798751d463f393aa3cacc493425c98c7b00aaf7267f72",
    "torch.cuda.get_sync_debug_mode": "890509269300222a84de85339eee8d97a863c5dfd3d333c12c002f17130f45ea",
    "torch.cuda.set_sync_debug_mode": "820d53dc2458d4be5639ccb576403354d574373f5cde2e982b092caee0091b2b",
    "torch.amp.autocast_mode.autocast.__init__": "0c55d668e2ff9c509ef879fd3254155f42727689b64d5d4a497bd99695fa2512",
    "torch.amp.grad_scaler.GradScaler.__init__": "beeaa9dfaad002599b6a75f26afc019221715e99fb3ebab482713dceabac4616",
    "torch.amp.autocast_mode.custom_fwd": "2f665f568576c2a10e351c70e1a410c7cc8edeadc3cc75b17732a448e785a8cc",
    "torch.amp.autocast_mode.custom_bwd": "e07adc3a17d4f3d4361e77648d6455443538ef600f0aff6092d9f11f7de81d6d",
    "torch.utils._device.DeviceContext.__init__": "786b946b20cf685f074f953fd93508406bb23f31a98485ce4059d72a9125609e",
    "torch.serialization.load": "eabc8a40415739b37926a529837739186ef23d8bb727e26cd5d2b8dec38047bb",
    "accelerate.utils.modeling.get_max_memory": "b9385fe2013505d4f32e3d27a8966272431e46fb9d54326cbad0261626e9eb82",
    "torch.distributed.distributed_c10d.init_process_group": "b26b016e14ccfda0b2a383a365527ad39a99b616c38f167cbe27c7d544778e73",
    "torch.distributed.distributed_c10d.new_group": "d5ff3e1763ec7ccd5ae9ea1ba97461b127a93cdc18e7a47462786af9005b27b5",
    # _data_parallel.py (nn.DataParallel over accel devices)
    "torch.nn.parallel.comm.broadcast": "5c959ac5a71150997f353ab960ed22ddc69138c35db6a970ecd6cdaa5aeaa676",
    "torch.nn.parallel.comm.broadcast_coalesced": "27dd4cbc61bc54a3dfc2915fc3a3428aefb73af95665e0b0767b13bfd175d6c8",
    "torch.nn.parallel.comm.scatter": "44e4f5f71a646da57d921f642d6fd61808130a9bdcd6585ea4aa98a7c2057a68",
    "torch.nn.parallel.comm.gather": "5ed17efa8bf6aab8cfa658afa354c265970c42a975c79e68763c4b0b1495d989",
    "torch._utils._get_available_device_type": "6df82059093e1639db7f36c462f57a9d63a2f9c0edbf8b4e3f4b7f2055d68da1",
    "torch.nn.parallel.data_parallel.DataParallel.__init__": "da9aabf67411d3f468134aea2c433255275035eb17ec68849553b86f4dae949a",
    "torch.nn.parallel.data_parallel.data_parallel": "0901210c0e55e8688f8259b794083334b4e86ce413305cf11271a42a8ddf3391",
    # _interop.py (DLPack, __cuda_array_interface__)
    "torch._tensor.Tensor.__dlpack_device__": "f8e6198f4e14f7d804be5a6c067ee7d1def86f6e67c0e12fb57bc20cd3737217",
    "torch._tensor.Tensor.__dlpack__": "c67cfc5a76af4b7e8db19d3d5ec444e5abffe41b4b683fc70f3ae54c002a25e7",
    "torch._tensor.Tensor.__cuda_array_interface__": "340dabaaf51338cb82399f2a6cb9a48558bd20c15586b4201be3e2fc2efcb1ab",
    "torch.utils.dlpack.from_dlpack": "9079d1714f876d35fb1ec213e053bbbc103d70955b3456f94fdc6431a2092a67",
    # _safetensors.py (safetensors 0.8.0, a test dependency; patched when it loads)
    "safetensors.torch.load_file": "e4dd067a52391628f8a441384012e1f66fbec41fba6dca5113789cf9764a2163",
}


class Patch:
    """A patch: the qualified names of the code it adapts, and the function that
    installs it, called once with their originals (by ``apply``)."""

    __slots__ = ("names", "install")

    def __init__(self, names: tuple[str, ...], install: Callable[..., None]) -> None:
        self.names = names
        self.install = install

    def __repr__(self) -> str:
        return f"<patch {self.install.__module__}.{self.install.__qualname__} of {', '.join(self.names)}>"


# Every declared patch, by each name it adapts.
_declared: dict[str, Patch] = {}
# Qualified name -> the original, for the patches applied in this process.
_originals: dict[str, Any] = {}


def patch(*names: str) -> Callable[[Callable[..., None]], Patch]:
    """Declare the decorated function as the patch of ``names`` (keys of SOURCE_SHA256).

    The function is not called here: ``apply`` calls it, once, with the
    original of each name in order.
    """
    for name in names:
        if name not in SOURCE_SHA256:
            raise KeyError(f"{name} is patched without a hash of its source in torch_accel._patches.SOURCE_SHA256")

    def declare(install: Callable[..., None]) -> Patch:
        declared = Patch(names, install)
        for name in names:
            if name in _declared:
                raise ValueError(f"{name} is patched twice: by {_declared[name].install.__qualname__} and {install.__qualname__}")
            _declared[name] = declared
        return declared

    return declare


def _resolve(name: str) -> Any:
    """The function ``name`` (a module attribute or a class attribute) names now;
    for a classmethod or staticmethod, its function; for a property, its getter."""
    owner_name, _, attribute = name.rpartition(".")
    try:
        owner: Any = importlib.import_module(owner_name)
    except ModuleNotFoundError:
        module_name, _, class_name = owner_name.rpartition(".")
        owner = getattr(importlib.import_module(module_name), class_name)
    value = vars(owner)[attribute]
    if isinstance(value, property):
        return value.fget
    return getattr(value, "__func__", value)


def apply(*patches: Patch) -> None:
    """Apply each of ``patches`` unless it is applied already: record the
    originals of its names, then install it with them."""
    for declared in patches:
        if declared.names[0] in _originals:
            continue
        originals = [_resolve(name) for name in declared.names]
        _originals.update(zip(declared.names, originals))
        declared.install(*originals)


def declared() -> dict[str, Patch]:
    """Every patch declared by the modules imported so far, by name."""
    return dict(_declared)


def original(name: str) -> Callable[..., Any]:
    """The unpatched code ``name`` (one of SOURCE_SHA256), patched or not, unwrapped."""
    if name not in SOURCE_SHA256:
        raise KeyError(f"{name} is not in torch_accel._patches.SOURCE_SHA256")
    return inspect.unwrap(_originals[name] if name in _originals else _resolve(name))


def source_sha256(function: Callable[..., Any]) -> str:
    return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()


def rebind(original: Any, replacement: Any, package: str) -> None:
    """Replace ``original`` with ``replacement`` wherever a loaded module of
    ``package`` bound it by name (``from .utils import f``); modules loaded
    later import the replacement from its defining module. For patches only."""
    for name, module in list(sys.modules.items()):
        if module is None or not (name == package or name.startswith(package + ".")):
            continue
        for attribute, value in list(vars(module).items()):
            if value is original:
                setattr(module, attribute, replacement)
